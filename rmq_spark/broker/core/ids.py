"""What the broker makes up for a send, whichever protocol carried it: client-style message
ids (UNIQ_KEY), the next queue of a topic in turn, and the sender's address from a gRPC
peer string."""

from __future__ import annotations

import functools
import itertools
import os
import random
import threading
import time
from urllib.parse import unquote

from rmq_spark.codec.record import encode_host, parse_host
from rmq_spark.errors import InvalidArgumentError

#: the born host of a send whose transport has no IP address (a Unix socket)
UNKNOWN_BORN_HOST = "127.0.0.1:0"


@functools.lru_cache(maxsize=4096)
def born_host(peer: str) -> str:
    """The sender's address from gRPC's peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``);
    other transports (unix sockets) give :data:`UNKNOWN_BORN_HOST`. Cached: a connection
    sends many batches, and parsing the address costs ~10 us a call."""
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        address = unquote(address)  # older gRPC versions percent-encode the brackets
        try:
            parse_host(address)
        except InvalidArgumentError:
            return UNKNOWN_BORN_HOST
        return address
    return UNKNOWN_BORN_HOST


class RoundRobin:
    """One counter per topic, like a RocketMQ producer's sendWhichQueue, but on the broker."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}
        self._lock = threading.Lock()

    def next(self, topic: str) -> int:
        with self._lock:
            counter = self._counters.get(topic)
            if counter is None:
                counter = self._counters[topic] = itertools.count()
            return next(counter)


class UniqueIdGenerator:
    """Client-style message ids (UNIQ_KEY): 32 upper-case hex characters, unique.

    Layout, like RocketMQ's MessageClientIDSetter: a fixed prefix of the store IP (4 bytes),
    the process id (2 bytes) and 2 random bytes, then the time in seconds (4 bytes) and a
    counter (4 bytes) that starts at a random value and wraps.
    """

    def __init__(self, store_host: str) -> None:
        address, _ = encode_host(store_host)
        ip = address[:-4][-4:]  # the IPv4 address, or the last 4 bytes of an IPv6 one
        prefix = ip + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.randbytes(2)
        self._prefix = prefix.hex().upper()
        self._counter = random.getrandbits(32)
        self._lock = threading.Lock()

    def next_ids(self, count: int) -> list[str]:
        with self._lock:
            start = self._counter
            self._counter = (start + count) & 0xFFFFFFFF
        head = f"{self._prefix}{int(time.time()) & 0xFFFFFFFF:08X}"
        return [f"{head}{(start + i) & 0xFFFFFFFF:08X}" for i in range(count)]
