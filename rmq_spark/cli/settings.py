"""Reading the command's client flags: TLS, properties, timestamps, secrets."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from rmq_spark.errors import RocketliteError

if TYPE_CHECKING:
    import argparse

    from rmq_spark.client import ClientConfig
    from rmq_spark.spark_options.connect_options import TlsFields

T = TypeVar("T")


def tls_settings(args: argparse.Namespace) -> TlsFields:
    """The ClientConfig TLS fields from ``--tls``, ``--tls-ca-file``, ``--tls-cert-file`` and
    ``--tls-key-file`` (checked: a file flag needs ``--tls``, cert and key go together)."""
    given = [
        flag
        for flag, value in (
            ("--tls-ca-file", args.tls_ca_file),
            ("--tls-cert-file", args.tls_cert_file),
            ("--tls-key-file", args.tls_key_file),
        )
        if value is not None
    ]
    if given and not args.tls:
        raise RocketliteError(f"{given[0]} needs --tls")
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise RocketliteError("--tls-cert-file and --tls-key-file go together")
    return {
        "tls": args.tls,
        "tls_ca_file": args.tls_ca_file,
        "tls_cert_file": args.tls_cert_file,
        "tls_key_file": args.tls_key_file,
    }


def client_config(args: argparse.Namespace) -> ClientConfig:
    from rmq_spark.client import ClientConfig

    return ClientConfig(**tls_settings(args))


def parse_property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise RocketliteError(f"--property {text!r} is not NAME=VALUE")
    return name, value


def parse_timestamp(text: str) -> int:
    if not text.isdigit():
        raise RocketliteError(
            f"--from {text!r} is not earliest, latest or a store timestamp in epoch ms"
        )
    return int(text)


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_secret(args: argparse.Namespace) -> str:
    """The new user's secret: ``--secret-file``, else a prompt without echo on a terminal,
    else one line of stdin. Never printed."""
    if args.secret_file:
        try:
            with open(args.secret_file, encoding="utf-8") as f:
                secret = f.read().strip()
        except OSError as exc:
            raise RocketliteError(f"--secret-file {args.secret_file}: {exc.strerror}") from None
    elif sys.stdin.isatty():
        import getpass

        secret = getpass.getpass(f"secret for {args.name}: ")
        if getpass.getpass("again: ") != secret:
            raise RocketliteError("the two secrets differ")
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise RocketliteError("the secret is empty")
    return secret
