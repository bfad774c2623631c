"""TLS material for the broker and the clients: PEM files read and checked once, with errors
that name the setting (flag or option) and the file.

The checks use the standard library's ``ssl`` module, so a certificate that does not parse,
or a key that does not belong to its certificate, is reported when the broker or the client
is set up, not as a failed handshake later.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass

from rmq_spark.errors import InvalidArgumentError


@dataclass(frozen=True)
class Setting:
    """A file given under a name the user knows (``--tls-cert``, ``tlsCaFile``, ...)."""

    name: str
    path: str


def read_pem(setting: Setting, kind: str) -> bytes:
    """The bytes of a PEM file; ``kind`` is ``"CERTIFICATE"`` or ``"PRIVATE KEY"``."""
    try:
        with open(setting.path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise InvalidArgumentError(
            f"{setting.name} {setting.path}: cannot read the file ({exc.strerror or exc})"
        ) from None
    if b"-----BEGIN" not in data or kind.encode() not in data:
        what = "certificate" if kind == "CERTIFICATE" else "private key"
        raise InvalidArgumentError(
            f"{setting.name} {setting.path}: not a PEM {what} (expected a "
            f"'-----BEGIN ...{kind}-----' block)"
        )
    return data


def check_key_pair(cert: Setting, key: Setting) -> tuple[bytes, bytes]:
    """``(certificate chain, private key)`` PEM bytes, checked to belong together."""
    cert_pem = read_pem(cert, "CERTIFICATE")
    key_pem = read_pem(key, "PRIVATE KEY")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert.path, key.path, password=_no_password)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            problem = f"the key in {key.name} {key.path} does not belong to this certificate"
        else:
            problem = f"cannot load it with the key {key.name} {key.path} ({exc.reason or exc})"
        raise InvalidArgumentError(f"{cert.name} {cert.path}: {problem}") from None
    except (TypeError, ValueError):  # asked for a password: the key is encrypted
        raise InvalidArgumentError(
            f"{key.name} {key.path}: the private key is encrypted; give an unencrypted PEM key"
        ) from None
    return cert_pem, key_pem


def check_ca(setting: Setting) -> bytes:
    """PEM bytes of trusted CA certificates, checked to parse."""
    pem = read_pem(setting, "CERTIFICATE")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", "replace"))
    except ssl.SSLError as exc:
        raise InvalidArgumentError(
            f"{setting.name} {setting.path}: not a readable CA certificate ({exc.reason or exc})"
        ) from None
    return pem


def _no_password() -> str:
    raise ValueError("encrypted key")


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: 127.0.0.0/8, ::1 and localhost."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def describe_handshake_failure(details: str, tls: bool) -> str | None:
    """A hint for a connection failure that looks like a TLS mismatch, or None.

    gRPC reports these as UNAVAILABLE like a broker that is down; the details tell them
    apart: a failed handshake, or a socket the broker closed at once (a plaintext client at a
    TLS port, or a TLS client without the certificate a mutual-TLS broker requires).
    """
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            "TLS handshake failed: the broker's certificate is not trusted (not signed by the "
            "CA given as tls_ca_file, or not issued for this address)"
        )
    if "WRONG_VERSION_NUMBER" in details:
        return "TLS handshake failed: the broker does not serve TLS on this port (turn tls off)"
    if "handshake" in details.lower():
        return "TLS handshake failed; check the TLS settings of the client and the broker"
    if "Socket closed" in details or "Connection reset" in details:
        if tls:
            return (
                "the broker closed the connection during or right after the TLS handshake; "
                "it may require a client certificate (tls_cert_file and tls_key_file) signed "
                "by the CA it trusts"
            )
        return "the broker closed the connection; if it serves TLS, connect with tls enabled"
    return None
