"""Broker endpoint lists: ``"127.0.0.1:10911,127.0.0.1:10912"`` parsed once, validated.

There is no name server in rocketlite: a client is given every broker's address and asks
each one for its part of a route (see docs/protocol.md, "Admin and several brokers").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rmq_spark.errors import InvalidArgumentError

# host:port, or [ipv6]:port. Hosts are names or addresses; gRPC resolves them.
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")


def parse_endpoint(text: str) -> str:
    """Return ``text`` stripped if it is ``host:port`` (or ``[ipv6]:port``), else raise.

    >>> parse_endpoint(" 127.0.0.1:10911 ")
    '127.0.0.1:10911'
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"endpoint {text!r} must be a 'host:port' string")
    entry = text.strip()
    match = _HOST_PORT.match(entry)
    if match is None:
        raise InvalidArgumentError(
            f"endpoint {text!r} is not 'host:port' (e.g. '127.0.0.1:10911'; IPv6 as '[::1]:10911')"
        )
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise InvalidArgumentError(f"endpoint {text!r} has port {port}; ports are 1..65535")
    return entry


@dataclass(frozen=True)
class Endpoints:
    """The brokers a client talks to, in the order given, each once.

    >>> Endpoints.parse("127.0.0.1:10911, 127.0.0.1:10912").addresses
    ('127.0.0.1:10911', '127.0.0.1:10912')
    """

    addresses: tuple[str, ...]

    @classmethod
    def parse(cls, value: str | Iterable[str] | Endpoints) -> Endpoints:
        """Accept a comma-separated string, an iterable of ``host:port`` or an Endpoints."""
        if isinstance(value, Endpoints):
            return value
        items = value.split(",") if isinstance(value, str) else list(value)
        addresses: list[str] = []
        for item in items:
            address = parse_endpoint(item)
            if address in addresses:
                raise InvalidArgumentError(
                    f"endpoint {address!r} is listed twice in {value!r}; list each broker once"
                )
            addresses.append(address)
        if not addresses:
            raise InvalidArgumentError(
                f"no broker endpoint given ({value!r}); pass e.g. '127.0.0.1:10911'"
            )
        return cls(tuple(addresses))

    def __iter__(self) -> Iterator[str]:
        return iter(self.addresses)

    def __len__(self) -> int:
        return len(self.addresses)

    def __str__(self) -> str:
        return ",".join(self.addresses)
