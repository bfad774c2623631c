"""RocketMQ's request signature on the remoting protocol (its ACL client hook), both sides.

A signed request carries its user's access key and a signature in its header fields::

    AccessKey: <access key>        Signature: <Base64 of HMAC-SHA1(secret key, content)>

The content is the values of every other header field (``AccessKey`` included), in the order
of their names, run together, then the request's body. The signature covers the whole
request, so it cannot be moved to another one; it carries no time, so a captured request can
be sent again as it is (RocketMQ's own limit too).

>>> ext = {"topic": "T", "queueId": "0"}
>>> signed = sign_request(ext, b"", "alice", "secret")
>>> verify_request(signed, b"", {"alice": "secret"}.get)
'alice'
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Callable, Mapping
from hashlib import sha1

from rmq_spark.auth.signature import AuthenticationError
from rmq_spark.wire.remoting.codes import UNIQUE_KEY_QUERY

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: older clients (before 4.9.4) add UNIQUE_KEY_QUERY after signing: it is left out of the
#: content of their requests
V4_9_3 = 399
#: a request's body
Buffer = bytes | bytearray | memoryview


def content(ext: Mapping[str, str], body: Buffer, version: int = 0) -> bytes:
    """What a request's signature covers (see the module doc)."""
    skip = {SIGNATURE} | ({UNIQUE_KEY_QUERY} if 0 < version <= V4_9_3 else set())
    # Java's TreeMap orders names by UTF-16 code units: the same as Python for the ASCII
    # names headers use, and names outside the BMP do not occur.
    values = "".join(ext[name] for name in sorted(ext) if name not in skip)
    return values.encode() + bytes(body)


def signature(secret: str, data: bytes) -> str:
    digest = hmac.new(secret.encode(), data, sha1).digest()
    return base64.b64encode(digest).decode()


def sign_request(ext: Mapping[str, str], body: Buffer, access_key: str, secret: str) -> dict:
    """``ext`` with ``AccessKey`` and ``Signature`` added (client side)."""
    signed = {**ext, ACCESS_KEY: access_key}
    signed[SIGNATURE] = signature(secret, content(signed, body))
    return signed


def verify_request(
    ext: Mapping[str, str],
    body: Buffer,
    secret_of: Callable[[str], str | None],
    version: int = 0,
) -> str:
    """The authenticated access key of a request (server side); AuthenticationError if the
    request is not signed, or not by a known user's secret. The reason never tells a wrong
    secret from an unknown user."""
    access_key = ext.get(ACCESS_KEY)
    given = ext.get(SIGNATURE)
    if not access_key or not given:
        raise AuthenticationError(
            "no credentials: the broker requires signed requests; give the client an "
            "AclClientRPCHook with the access key and secret key"
        )
    secret = secret_of(access_key)
    # A signature is computed for an unknown user too, so both take the same time.
    expected = signature(secret if secret is not None else "\0unknown", content(ext, body, version))
    if not hmac.compare_digest(expected.encode(), given.encode()) or secret is None:
        raise AuthenticationError("invalid access key or signature")
    return access_key
