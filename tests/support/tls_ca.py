"""A throw-away certificate authority for TLS tests, made with ``cryptography`` at test time
(no key or certificate is checked in).

``make_pki(directory)`` writes PEM files and returns their paths:

* ``ca``: the test CA; ``server``/``server_key``: for ``127.0.0.1`` (IP SAN) and ``localhost``
* ``client``/``client_key``: a client certificate of the same CA (mutual TLS)
* ``other_ca`` and ``other_client``/``other_client_key``: a second, unrelated CA and a
  client certificate it signed (the "wrong CA" cases)
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path
    other_ca: Path
    other_client: Path
    other_client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


def _ca(common_name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return key, _validity(builder).sign(key, hashes.SHA256())


def _leaf(ca_key, ca_cert, common_name: str, *, server: bool):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
    return key, _validity(builder).sign(ca_key, hashes.SHA256())


def _write_cert(path: Path, cert) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("rocketlite test CA")
    server_key, server_cert = _leaf(ca_key, ca_cert, "rocketlite test broker", server=True)
    client_key, client_cert = _leaf(ca_key, ca_cert, "rocketlite test client", server=False)
    other_key, other_cert = _ca("unrelated test CA")
    stranger_key, stranger_cert = _leaf(other_key, other_cert, "stranger", server=False)
    return Pki(
        ca=_write_cert(directory / "ca.pem", ca_cert),
        server=_write_cert(directory / "server.pem", server_cert),
        server_key=_write_key(directory / "server.key", server_key),
        client=_write_cert(directory / "client.pem", client_cert),
        client_key=_write_key(directory / "client.key", client_key),
        other_ca=_write_cert(directory / "other-ca.pem", other_cert),
        other_client=_write_cert(directory / "other-client.pem", stranger_cert),
        other_client_key=_write_key(directory / "other-client.key", stranger_key),
    )
