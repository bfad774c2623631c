"""The ``rocketlite`` sink's options, parsed once on the driver into :class:`SinkOptions`.

>>> opts = SinkOptions.parse({"endpoints": "127.0.0.1:10911", "topic": "out"})
>>> opts.topic, opts.exactly_once, opts.send_batch_size
('out', True, 4096)
"""

from __future__ import annotations

import difflib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from rmq_spark.client.connection import ClientConfig
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import validate_sink_id, validate_topic
from rmq_spark.spark_options.connect_options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BACKOFF_MS,
    FileReads,
    client_config,
    credential_options,
    endpoints_option,
    name_server_option,
    retry_options,
    tls_options,
)
from rmq_spark.spark_options.option_values import RawOptions, bad

__all__ = ["SINK_ONLY", "SinkOptions", "local_checkpoint"]

OPTION_NAMES = (
    "endpoints",
    "nameServer",
    "topic",
    "sendBatchSize",
    "sendTimeoutMs",
    "maxRetries",
    "retryBackoffMs",
    "exactlyOnce",
    "sinkId",
    "checkpointLocation",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "accessKey",
    "secretKey",
    "secretKeyFile",
)
#: options only a writer takes: their presence says a DataFrame is being written
SINK_ONLY = ("sendBatchSize", "sendTimeoutMs", "exactlyOnce", "sinkId", "checkpointLocation")
_BY_KEY = {name.lower(): name for name in OPTION_NAMES}

DEFAULT_SEND_BATCH_SIZE = 4096
#: a broker takes at most 65,536 messages per send by default (--max-batch-messages)
MAX_SEND_BATCH_SIZE = 65_536
DEFAULT_SEND_TIMEOUT_MS = 30_000
_MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class SinkOptions:
    endpoints: tuple[str, ...]
    name_server: str | None
    #: the default target topic; a ``topic`` column overrides it per row
    topic: str | None
    send_batch_size: int = DEFAULT_SEND_BATCH_SIZE
    send_timeout_ms: int = DEFAULT_SEND_TIMEOUT_MS
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    exactly_once: bool = True
    #: the sink id given as an option; streams otherwise derive it from the checkpoint
    sink_id: str | None = None
    checkpoint_location: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, reads: FileReads | None = None) -> SinkOptions:
        """Check ``options`` (any key case) for a write; parses sharing ``reads`` read the
        files the options name once."""
        raw = RawOptions(_canonical_keys(options), streaming=False)
        name_server = name_server_option(raw)
        exactly_once = raw.flag("exactlyOnce", True)
        checkpoint = raw.get("checkpointLocation")
        if exactly_once and name_server is not None and checkpoint is not None:
            local_checkpoint(checkpoint)
        topic = raw.get("topic")
        if topic is not None:
            try:
                validate_topic(topic)
            except InvalidArgumentError as exc:
                raise bad("topic", topic, str(exc)) from None
        credentials = credential_options(raw, reads)
        sink_id = raw.get("sinkId")
        if sink_id is not None:
            try:
                validate_sink_id(sink_id)
            except InvalidArgumentError as exc:
                raise bad("sinkId", sink_id, str(exc)) from None
        return cls(
            endpoints=endpoints_option(raw),
            name_server=name_server,
            topic=topic,
            send_batch_size=raw.setting(
                "sendBatchSize", MAX_SEND_BATCH_SIZE, 1, DEFAULT_SEND_BATCH_SIZE
            ),
            send_timeout_ms=raw.setting("sendTimeoutMs", _MAX_INT, 1, DEFAULT_SEND_TIMEOUT_MS),
            **retry_options(raw),
            exactly_once=exactly_once,
            sink_id=sink_id,
            checkpoint_location=checkpoint,
            **tls_options(raw, reads),
            access_key=credentials.get("access_key"),
            secret_key=credentials.get("secret_key"),
        )

    def client_config(self) -> ClientConfig:
        return client_config(
            max_retries=self.max_retries,
            retry_backoff_ms=self.retry_backoff_ms,
            request_timeout_ms=self.send_timeout_ms,
            tls=self.tls,
            tls_ca_file=self.tls_ca_file,
            tls_cert_file=self.tls_cert_file,
            tls_key_file=self.tls_key_file,
            access_key=self.access_key,
            secret_key=self.secret_key,
        )

    def stream_sink_id(self) -> str:
        """The sink id of a streaming query: ``sinkId``, else one derived from the
        checkpoint location (the same on every restart from that checkpoint)."""
        if self.sink_id is not None:
            return self.sink_id
        if self.checkpoint_location is None:
            raise InvalidArgumentError(
                "exactly-once writes need a stable sink id: set .option('checkpointLocation', "
                "...) on writeStream, or the option sinkId (unique per query), or "
                "exactlyOnce=false for at-least-once writes"
            )
        location = self.checkpoint_location
        if "://" not in location:
            location = os.path.abspath(location)
        digest = hashlib.sha256(location.encode()).hexdigest()[:24]
        return f"q-{digest}"


def local_checkpoint(location: str) -> str:
    """The local directory of a checkpoint given as a path or a ``file:`` URI; other file
    systems are refused (exactly once through ``nameServer`` locks files there).

    >>> local_checkpoint("file:///tmp/ck"), local_checkpoint("/tmp/ck")
    ('/tmp/ck', '/tmp/ck')
    """
    path = location
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    elif "://" in path:
        raise bad(
            "checkpointLocation",
            location,
            "exactly-once writes through nameServer record each micro-batch in the checkpoint "
            "and lock its files, so it must be a local path or a file: URI (or set "
            "exactlyOnce=false for at-least-once writes)",
        )
    return os.path.abspath(path)


def _canonical_keys(options: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_KEY.get(str(key).lower())
        if name is None:
            guesses = difflib.get_close_matches(str(key).lower(), list(_BY_KEY), n=3)
            hint = f" (did you mean {' or '.join(_BY_KEY[g] for g in guesses)}?)" if guesses else ""
            raise InvalidArgumentError(
                f"unknown option {key!r} for the rocketlite sink{hint}. "
                f"Valid options: {', '.join(OPTION_NAMES)}"
            )
        if not isinstance(value, str):
            raise bad(name, value, "option values are strings, as Spark passes them")
        values[name] = value
    return values
