"""The options of one ``load()``, parsed once for every use Spark may make of them.

Spark creates the data source (and checks its options) before it says whether the query
reads a batch, reads a stream or writes, so :func:`parse_for_load` parses the options for
all three, sharing one :class:`~rmq_spark.spark_options.connect_options.FileReads`: the TLS files
and the secret key file are read once. The result is kept on the data source, which Spark
pickles to the Python processes that plan the read or the write: they use it as it is.

>>> loaded = parse_for_load({"endpoints": "127.0.0.1:10911", "topic": "orders"})
>>> loaded.source(streaming=True).starting.kind, loaded.source(streaming=False).starting.kind
('latest', 'earliest')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.options import SINK_ONLY, SinkOptions
from rmq_spark.source.options import BATCH_ONLY, STREAMING_ONLY, SourceOptions
from rmq_spark.spark_options.connect_options import FileReads

__all__ = ["LoadedOptions", "load_error", "parse_for_load"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class LoadedOptions:
    """Each mode's parsed options, or the message of the error its parse raised."""

    streaming: SourceOptions | str
    batch: SourceOptions | str
    sink: SinkOptions | str

    def source(self, streaming: bool) -> SourceOptions:
        """The options of a streaming or batch read; raises that mode's error."""
        return _value(self.streaming if streaming else self.batch)

    def writer(self) -> SinkOptions:
        """The options of a write; raises the write's error."""
        return _value(self.sink)

    def check_read(self, keys: set[str]) -> None:
        """Raise the error of a read with these options, when neither reading mode can use
        them (Spark asks for the schema of a read at ``load()``, and only of a read)."""
        error = _source_error(keys, _error(self.streaming), _error(self.batch))
        if error is not None:
            raise InvalidArgumentError(error)

    def check(self, keys: set[str]) -> None:
        """Raise the error ``load()`` raises for these options (``keys``: the option names
        given, lower-cased); see :func:`load_error`."""
        error = load_error(keys, _error(self.streaming), _error(self.batch), _error(self.sink))
        if error is not None:
            raise InvalidArgumentError(error)


def parse_for_load(options: Mapping[str, str]) -> LoadedOptions:
    """Parse ``options`` for a streaming read, a batch read and a write."""
    reads = FileReads()
    return LoadedOptions(
        streaming=_parsed(lambda: SourceOptions.parse(options, streaming=True, reads=reads)),
        batch=_parsed(lambda: SourceOptions.parse(options, streaming=False, reads=reads)),
        sink=_parsed(lambda: SinkOptions.parse(options, reads=reads)),
    )


def load_error(
    keys: set[str], streaming: str | None, batch: str | None, sink: str | None
) -> str | None:
    """The error ``load()`` raises, from each mode's parse error (None: that mode parsed)
    and the lower-cased option names given.

    An option of one mode only decides the mode (its errors are then that mode's); without
    one, the streaming parse's error stands for the source when both reading modes fail.
    Options a writer can use pass; when neither reading nor writing can use them, both
    errors are told unless they are the same.
    """
    if any(name.lower() in keys for name in SINK_ONLY):
        return sink
    source = _source_error(keys, streaming, batch)
    if source is None or sink is None:
        return None
    if sink == source:
        return source
    # Spark does not say yet whether this is a read or a write: say both.
    return f"{source}\nAs options of a write: {sink}"


def _source_error(keys: set[str], streaming: str | None, batch: str | None) -> str | None:
    if any(name.lower() in keys for name in BATCH_ONLY):
        return batch
    if streaming is None or any(name.lower() in keys for name in STREAMING_ONLY):
        return streaming
    return None if batch is None else streaming


def _parsed(parse: Callable[[], _T]) -> _T | str:
    try:
        return parse()
    except InvalidArgumentError as exc:
        return str(exc)


def _value(parsed: _T | str) -> _T:
    if isinstance(parsed, str):
        raise InvalidArgumentError(parsed)
    return parsed


def _error(parsed: object) -> str | None:
    return parsed if isinstance(parsed, str) else None
