"""The one exception hierarchy of rocketlite.

Every error says what was wrong (with the offending value) and what to do. The broker maps
these classes to gRPC status codes at the servicer boundary, and the client maps status codes
back to these classes, so callers catch the same exceptions in-process and over the wire.
"""

from __future__ import annotations

from collections.abc import Iterable


class RocketliteError(Exception):
    """Base class of every error raised by rocketlite."""

    #: gRPC status code name used when this error crosses the wire.
    grpc_code = "INTERNAL"
    #: True when the same request may succeed if sent again later, here or to another
    #: broker. The one rule of the clients' own retries: they send a request again after
    #: these errors and no others (a producer also moves to another broker after a refusal
    #: that may come from a stale route).
    retriable = False


class InvalidArgumentError(RocketliteError, ValueError):
    """A value given by the caller is malformed or out of range."""

    grpc_code = "INVALID_ARGUMENT"


class InvalidNameError(InvalidArgumentError):
    """A topic or group name breaks RocketMQ's naming rule."""


class NotFoundError(RocketliteError, LookupError):
    """The topic, queue, group or message does not exist."""

    grpc_code = "NOT_FOUND"


class AlreadyExistsError(RocketliteError):
    grpc_code = "ALREADY_EXISTS"


class PermissionDeniedError(RocketliteError):
    """The topic or broker does not allow this operation (see topic permissions 2/4/6)."""

    grpc_code = "PERMISSION_DENIED"


class ReservedTopicError(PermissionDeniedError):
    """A client named a topic the broker keeps for itself (its transaction, delay, timer
    and staging topics, or a dead-letter queue) where only the broker may write."""


class UnauthenticatedError(RocketliteError):
    """The broker requires signed requests and could not authenticate this one (no, wrong or
    stale credentials: see ClientConfig.access_key / secret_key)."""

    grpc_code = "UNAUTHENTICATED"


class ResourceExhaustedError(RocketliteError):
    """A size or count limit was exceeded, or the disk is (almost) full."""

    grpc_code = "RESOURCE_EXHAUSTED"


class UnavailableError(RocketliteError):
    """The broker is not reachable or is shutting down; retry, possibly on another broker."""

    grpc_code = "UNAVAILABLE"
    retriable = True


class FlushTimeoutError(RocketliteError):
    """SYNC flush did not complete in time; the data may or may not be durable.

    Not retriable: the messages are stored (and most likely flushed soon), so sending them
    again would store them twice.
    """

    grpc_code = "DEADLINE_EXCEEDED"


class StoreError(RocketliteError):
    """The store cannot be opened or used as asked."""

    grpc_code = "FAILED_PRECONDITION"


class StoreFailedError(UnavailableError, StoreError):
    """The store stopped after a failed disk sync (fail-stop): nothing it holds past its last
    good sync is served; a restart recovers from the commit log. Try another broker."""

    grpc_code = "UNAVAILABLE"


class StoreLockedError(StoreError):
    """Another process holds the store directory."""


class CorruptDataError(StoreError):
    """Bytes on disk or on the wire do not decode to valid records."""

    grpc_code = "DATA_LOSS"


class FilterNotSupportedError(RocketliteError):
    """The broker does not filter by this kind of expression (SQL92 on a broker started
    with its property filter off); subscribe by tag, or filter on the client."""

    grpc_code = "FAILED_PRECONDITION"


class DataLossError(RocketliteError):
    """Requested data is gone (e.g. deleted by retention) and the caller asked to fail."""

    grpc_code = "OUT_OF_RANGE"


#: the trailing-metadata key carrying the error class name across the wire
ERROR_CLASS_METADATA = "rocketlite-error-class"


class RequestTimeoutError(RocketliteError):
    """The call did not complete before its deadline (client side, or a long poll).

    Retriable: a broker that was slow (busy, pausing) may answer the next attempt; a send
    that did reach it is then stored twice (sends are at least once).
    """

    grpc_code = "DEADLINE_EXCEEDED"
    retriable = True


def _all_error_classes() -> dict[str, type[RocketliteError]]:
    found: dict[str, type[RocketliteError]] = {}
    pending: list[type[RocketliteError]] = [RocketliteError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found


# The class a bare status code becomes when the broker did not name one.
_BY_CODE: dict[str, type[RocketliteError]] = {
    "INVALID_ARGUMENT": InvalidArgumentError,
    "NOT_FOUND": NotFoundError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "PERMISSION_DENIED": PermissionDeniedError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "UNAVAILABLE": UnavailableError,
    "DEADLINE_EXCEEDED": RequestTimeoutError,
    "FAILED_PRECONDITION": StoreError,
    "DATA_LOSS": CorruptDataError,
    "OUT_OF_RANGE": DataLossError,
}


def error_from_status(
    code_name: str, message: str, class_name: str | None = None
) -> RocketliteError:
    """Rebuild the exception a broker raised from its gRPC status (client side).

    The class named in the trailing metadata wins when it has the same status code;
    otherwise the general class of that code; otherwise :class:`RocketliteError`.

    >>> type(error_from_status("NOT_FOUND", "topic 'x' does not exist")).__name__
    'NotFoundError'
    """
    general = _BY_CODE.get(code_name, RocketliteError)
    cls = _all_error_classes().get(class_name or "")
    if cls is None or cls.grpc_code != code_name:
        cls = general
    try:
        return cls(message)
    except TypeError:  # a class built from more than a message (e.g. a code and a message)
        return general(message)


def shown(value: object, limit: int = 64) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters: a request
    field is echoed so the user can find it, never whole (it may be megabytes long).

    >>> shown("TagA")
    "'TagA'"
    >>> shown("x" * 100, limit=8)
    "'xxxxxxx... (100 characters)"
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    unit = "bytes" if isinstance(value, bytes) else "characters"
    return f"{text[:limit]}... ({size} {unit})"


def check_whole_numbers(settings: object, names: Iterable[str], minimum: int) -> None:
    """Raise :class:`InvalidArgumentError` naming the first attribute of ``settings`` among
    ``names`` that is not a whole number >= ``minimum`` (``True``/``False`` are refused)."""
    for name in names:
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise InvalidArgumentError(f"{name}={value!r} must be a whole number >= {minimum}")
