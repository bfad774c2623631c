"""The options every ``rocketlite`` reader and writer takes to reach brokers: ``endpoints``
or ``nameServer``, TLS and access keys, each checked on the driver with errors naming the
option."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypedDict, TypeVar, cast

from rmq_spark.client.connection import ClientConfig, RetryPolicy
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.spark_options.option_values import RawOptions, bad

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RETRY_BACKOFF_MS",
    "MAX_RETRY_BACKOFF_MS",
    "FileReads",
    "client_config",
    "credential_options",
    "endpoints_option",
    "is_address",
    "name_server_option",
    "retry_options",
    "store_options",
    "tls_options",
]

#: options that say how to reach brokers over the network: no use with ``storePath``
NETWORK_OPTIONS = (
    "endpoints",
    "nameServer",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "accessKey",
    "secretKey",
    "secretKeyFile",
    "pullTimeoutMs",
    "maxRetries",
    "retryBackoffMs",
)
#: the broker name of rows read from a store directory, unless the option brokerName says
DEFAULT_STORE_BROKER_NAME = "broker-a"

_T = TypeVar("_T")


class FileReads:
    """The files options name, read once for every parse given the same object.

    A data source parses its options for a batch read, a stream and a write; with one
    ``FileReads`` the TLS files are checked and the secret key file is read once, not once
    per parse. Each result (or error message) is kept under the paths it was read from, so
    only reads of the same files are shared.
    """

    def __init__(self) -> None:
        self._done: dict[tuple[str | None, ...], tuple[object, str | None]] = {}

    def once(self, key: tuple[str | None, ...], read: Callable[[], _T]) -> _T:
        """``read()``'s result the first time ``key`` is asked for, the same result (or the
        same error) afterwards."""
        if key not in self._done:
            try:
                self._done[key] = (read(), None)
            except InvalidArgumentError as exc:
                self._done[key] = (None, str(exc))
        value, error = self._done[key]
        if error is not None:
            raise InvalidArgumentError(error)
        return cast(_T, value)  # what read() returned for this key


class StoreFields(TypedDict, total=False):
    """The store fields of the source's options, when ``storePath`` is given."""

    store_path: str
    allow_live_store: bool
    store_broker_name: str


def store_options(raw: RawOptions) -> StoreFields:
    """``storePath`` (a store directory read without a broker), ``allowLiveStore`` and
    ``brokerName``; refuses the options that only make sense over the network."""
    path = raw.get("storePath")
    if path is None:
        for name in ("allowLiveStore", "brokerName"):
            if raw.has(name):
                raise InvalidArgumentError(
                    f"option {name} only applies with storePath (reading a store directory "
                    "without a broker); remove it or add storePath"
                )
        return {}
    if not path.strip():
        raise bad("storePath", path, "expected the path of a store directory")
    network = [name for name in NETWORK_OPTIONS if raw.has(name)]
    if network:
        raise InvalidArgumentError(
            f"option {network[0]} has no use with storePath: a store directory is read from "
            "the file system, without a broker. Remove it, or remove storePath to read "
            "through brokers"
        )
    broker_name = raw.get("brokerName")
    if broker_name is not None and not broker_name.strip():
        raise bad("brokerName", broker_name, "expected the broker name the rows should carry")
    return {
        # absolute here, on the driver: executors run in other working directories
        "store_path": os.path.abspath(os.path.expanduser(path.strip())),
        "allow_live_store": raw.flag("allowLiveStore", False),
        "store_broker_name": (broker_name or DEFAULT_STORE_BROKER_NAME).strip(),
    }


def endpoints_option(raw: RawOptions) -> tuple[str, ...]:
    from rmq_spark.client.endpoints import Endpoints

    text = raw.get("endpoints")
    if raw.has("storePath"):
        return ()  # store_options refuses endpoints next to it
    if raw.has("nameServer"):
        if text is not None:
            raise InvalidArgumentError(
                "give the option endpoints (rocketlite brokers over gRPC) or nameServer (a "
                "RocketMQ name server), not both"
            )
        return ()
    if text is None or not text.strip():
        raise InvalidArgumentError(
            "option endpoints is required: the brokers as a comma-separated "
            "list of host:port, e.g. '127.0.0.1:10911,127.0.0.1:10912' (or nameServer "
            "'host:9876' for an Apache RocketMQ cluster, or storePath for a store directory)"
        )
    try:
        return Endpoints.parse(text).addresses
    except InvalidArgumentError as exc:
        raise bad("endpoints", text, str(exc)) from None


def name_server_option(raw: RawOptions) -> str | None:
    text = raw.get("nameServer")
    if text is None:
        return None
    servers = [part.strip() for part in text.split(";") if part.strip()]
    if not servers or any(not is_address(s) for s in servers):
        raise bad("nameServer", text, "use host:port of a name server, e.g. '10.0.0.5:9876' "
                  "(several separated by ';')")  # fmt: skip
    return ";".join(servers)


def is_address(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


class TlsFields(TypedDict):
    """The TLS fields of a ClientConfig (and of the source's and sink's options)."""

    tls: bool
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None


class Credentials(TypedDict, total=False):
    """``access_key`` and ``secret_key`` of a ClientConfig, when the options give them."""

    access_key: str
    secret_key: str


def tls_options(raw: RawOptions, reads: FileReads | None = None) -> TlsFields:
    """The TLS options, checked here on the driver: files readable and usable, a client
    certificate with its key (the files checked through ``reads`` when given)."""
    enabled = raw.flag("tls", False)
    files = {name: raw.get(name) for name in ("tlsCaFile", "tlsCertFile", "tlsKeyFile")}
    given = [name for name, path in files.items() if path is not None]
    if given and not enabled:
        raise InvalidArgumentError(
            f"option {given[0]} only applies with tls=true; set tls=true or remove it"
        )
    ca, cert, key = files["tlsCaFile"], files["tlsCertFile"], files["tlsKeyFile"]
    if (cert is None) != (key is None):
        given_name, missing = (
            ("tlsCertFile", "tlsKeyFile") if key is None else ("tlsKeyFile", "tlsCertFile")
        )
        raise InvalidArgumentError(
            f"option {given_name} needs the option {missing} (a client certificate and its key)"
        )
    if ca is not None or cert is not None:
        (reads or FileReads()).once(("tls", ca, cert, key), lambda: _check_tls_files(ca, cert, key))
    return {"tls": enabled, "tls_ca_file": ca, "tls_cert_file": cert, "tls_key_file": key}


def _check_tls_files(ca: str | None, cert: str | None, key: str | None) -> None:
    from rmq_spark import tls

    try:
        if ca is not None:
            tls.check_ca(tls.Setting("option tlsCaFile", ca))
        if cert is not None and key is not None:
            tls.check_key_pair(
                tls.Setting("option tlsCertFile", cert), tls.Setting("option tlsKeyFile", key)
            )
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"{exc}; TLS files must be readable at the same path on the driver and every executor"
        ) from None


def credential_options(raw: RawOptions, reads: FileReads | None = None) -> Credentials:
    """accessKey with secretKey or secretKeyFile (read here, on the driver, through ``reads``
    when given). Messages name the options and the file, never the secret."""
    access_key = raw.get("accessKey")
    secret = raw.get("secretKey")
    secret_file = raw.get("secretKeyFile")
    if secret is not None and secret_file is not None:
        raise InvalidArgumentError("give option secretKey or secretKeyFile, not both")
    if secret_file is not None:
        path = secret_file
        secret = (reads or FileReads()).once(("secret", path), lambda: _read_secret(path))
    if not access_key and not secret:
        return {}
    if not access_key or not secret:
        raise InvalidArgumentError(
            "option accessKey needs secretKey or secretKeyFile, and they need accessKey"
        )
    return {"access_key": access_key, "secret_key": secret}


def _read_secret(path: str) -> str:
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InvalidArgumentError(
            f"option secretKeyFile: cannot read {path}: {exc.strerror}"
        ) from None
    if not secret:
        raise InvalidArgumentError(f"option secretKeyFile: {path} is empty")
    return secret


#: the longest pause between two retries of an unavailable broker
MAX_RETRY_BACKOFF_MS = 10_000
DEFAULT_MAX_RETRIES = 3  # as Kafka's fetchOffset.numRetries
DEFAULT_RETRY_BACKOFF_MS = 1_000  # as Kafka's fetchOffset.retryIntervalMs
_MAX_INT = 2**31 - 1


class RetryFields(TypedDict):
    """The retry fields of the source's and the sink's options."""

    max_retries: int
    retry_backoff_ms: int


def retry_options(raw: RawOptions) -> RetryFields:
    """``maxRetries`` (retries of an unavailable broker) and ``retryBackoffMs`` (the first
    pause between them, doubling up to :data:`MAX_RETRY_BACKOFF_MS`)."""
    return {
        "max_retries": raw.setting("maxRetries", 1000, 0, DEFAULT_MAX_RETRIES),
        "retry_backoff_ms": raw.setting("retryBackoffMs", _MAX_INT, 0, DEFAULT_RETRY_BACKOFF_MS),
    }


def client_config(
    *,
    max_retries: int,
    retry_backoff_ms: int,
    request_timeout_ms: int,
    tls: bool,
    tls_ca_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    access_key: str | None,
    secret_key: str | None,
) -> ClientConfig:
    """The client settings of a reader or writer: ``maxRetries`` retries after UNAVAILABLE,
    waiting ``retryBackoffMs`` and doubling (1 s, 2 s, 4 s by default: a broker restart
    fits); without an access key, ClientConfig's default (ROCKETLITE_ACCESS_KEY, if set)."""
    config = ClientConfig(
        request_timeout_ms=request_timeout_ms,
        retry=RetryPolicy(
            attempts=max_retries + 1,
            backoff_ms=retry_backoff_ms,
            max_backoff_ms=max(retry_backoff_ms, MAX_RETRY_BACKOFF_MS),
        ),
        tls=tls,
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
    )
    if access_key is None:
        return config
    return replace(config, access_key=access_key, secret_key=secret_key or "")
