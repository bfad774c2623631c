"""The RocketMQ 5 request signature (ACL 2.0), as the official clients send it.

Every call carries two metadata entries::

    x-mq-date-time: 20260125T101502Z
    authorization: MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time,
                   Signature=<hex HMAC-SHA1 of the date-time string, keyed with the secret>

The signature proves the caller knows the secret; it signs only the date-time, so a
captured header can be replayed. The server narrows that to a freshness window (15 minutes
by default) around its clock. Two clocks are accepted: UTC, and the broker's local time,
because the official Python client formats its *local* time with a literal ``Z``.

A stream is checked once, when it opens: RocketMQ's Telemetry stream lives for days on the
headers it was opened with, so the window applies to unary calls and to the opening of
streams, never to messages flowing on a stream already open.

Reasons given to callers never tell a wrong secret from an unknown access key, nor how
close a signature was.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import sha1

from rmq_spark.errors import UnauthenticatedError

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER = "x-mq-date-time"
AUTHORIZATION_HEADER = "authorization"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
#: how far a signed date-time may be from the broker's clock (either way) on a unary call
DEFAULT_REPLAY_WINDOW_S = 15 * 60


class AuthenticationError(UnauthenticatedError):
    """The caller could not be authenticated; ``str()`` is safe to send back."""


def format_date_time(when: datetime | None = None) -> str:
    """``yyyyMMdd'T'HHmmss'Z'`` of ``when`` (default: now, UTC)."""
    when = datetime.now(UTC) if when is None else when
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime(DATE_TIME_FORMAT)


def sign(secret: str, date_time: str) -> str:
    """Hex HMAC-SHA1 of ``date_time`` keyed with ``secret`` (RocketMQ's Signature.sign)."""
    return hmac.new(secret.encode("utf-8"), date_time.encode("utf-8"), sha1).hexdigest()


def signed_metadata(
    access_key: str, secret_key: str, when: datetime | None = None
) -> list[tuple[str, str]]:
    """The two metadata entries that authenticate one call (client side)."""
    date_time = format_date_time(when)
    authorization = (
        f"{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, "
        f"Signature={sign(secret_key, date_time)}"
    )
    return [(DATE_TIME_HEADER, date_time), (AUTHORIZATION_HEADER, authorization)]


@dataclass(frozen=True)
class Authorization:
    """A parsed ``authorization`` header."""

    algorithm: str
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Authorization:
    """Split at the first space, then on commas, each item at its first ``=``; the
    Credential is cut at ``/`` (part one is the access key)."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthenticationError(
            f"unsupported authorization scheme {algorithm[:32]!r}; expected {ALGORITHM}"
        )
    items: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, item = part.strip().partition("=")
        if not eq:
            raise AuthenticationError("malformed authorization header: an item has no '='")
        items[key.strip()] = item.strip()
    for needed in ("Credential", "SignedHeaders", "Signature"):
        if needed not in items:
            raise AuthenticationError(f"malformed authorization header: no {needed}")
    access_key = items["Credential"].split("/", 1)[0]
    signed = tuple(h.strip().lower() for h in items["SignedHeaders"].split(";") if h.strip())
    return Authorization(algorithm, access_key, signed, items["Signature"])


def _parse_date_time(text: str) -> datetime:
    try:
        return datetime.strptime(text, DATE_TIME_FORMAT)
    except ValueError:
        raise AuthenticationError(
            f"{DATE_TIME_HEADER} {text[:32]!r} is not yyyyMMddTHHmmssZ"
        ) from None


def check_fresh(date_time: str, window_s: float, now: datetime | None = None) -> None:
    """Refuse a signed date-time farther than ``window_s`` from now, UTC or local."""
    signed = _parse_date_time(date_time)
    now = datetime.now(UTC) if now is None else now.astimezone(UTC)
    clocks = (now.replace(tzinfo=None), now.astimezone().replace(tzinfo=None))
    window = timedelta(seconds=window_s)
    if all(abs(signed - clock) > window for clock in clocks):
        raise AuthenticationError(
            f"request signed at {date_time} is outside the broker's {window_s:g} s window "
            "(clock skew, or a replayed request); check the client's clock"
        )


def verify(
    metadata: Iterable[tuple[str, str | bytes]],
    secret_of: Callable[[str], str | None],
    *,
    window_s: float | None = DEFAULT_REPLAY_WINDOW_S,
    now: datetime | None = None,
) -> str:
    """The authenticated access key of a call, from its metadata (server side).

    ``secret_of(access_key)`` gives the user's secret, or None for an unknown (or disabled)
    user. ``window_s`` None skips the freshness check. Raises AuthenticationError.
    """
    headers: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            headers.setdefault(key.lower(), value)
    header = headers.get(AUTHORIZATION_HEADER)
    if not header:
        raise AuthenticationError(
            "no credentials: the broker requires signed requests (access key and secret key)"
        )
    parsed = parse_authorization(header)
    if not parsed.access_key:
        raise AuthenticationError(
            "no credentials: the request is signed with an empty access key; configure the "
            "client's access key and secret key"
        )
    if DATE_TIME_HEADER not in parsed.signed_headers:
        raise AuthenticationError(f"SignedHeaders must include {DATE_TIME_HEADER}")
    date_time = headers.get(DATE_TIME_HEADER)
    if not date_time:
        raise AuthenticationError(f"the {DATE_TIME_HEADER} header is missing")
    if window_s is not None:
        check_fresh(date_time, window_s, now)
    secret = secret_of(parsed.access_key)
    # Compute a signature even for an unknown user, so both take the same time.
    expected = sign(secret if secret is not None else "\0unknown", date_time)
    if not hmac.compare_digest(expected.encode(), parsed.signature.lower().encode()):
        raise AuthenticationError("invalid access key or signature")
    if secret is None:
        raise AuthenticationError("invalid access key or signature")
    return parsed.access_key
