"""RocketMQ's transactional messages over the remoting protocol, many at a time.

* :class:`HalfSender` sends half messages (``TRAN_MSG``, ``PGROUP``, the prepared sys flag):
  one message per SEND_MESSAGE_V2, as RocketMQ's brokers take no transactional batch, with
  many requests in flight on one connection per broker. Each send's answer gives the half
  message's coordinates (:class:`HalfRef`): its commit-log offset (from the offset message
  id) and its queue offset in the broker's half topic (``tranStateTableOffset``).
* :func:`end_halves` ends half messages with END_TRANSACTION (commit or rollback), sent as
  requests with an answer (Java sends them oneway), so the caller knows each was applied.
  A commit is never sent twice here: RocketMQ 4.9 writes a half message to its topic again
  if asked again.
* :class:`CheckListener` is a live member of a producer group: it heartbeats to brokers so
  they can send CHECK_TRANSACTION_STATE on its connection, hands each check to a callback
  and sends the callback's answer as END_TRANSACTION (``fromTransactionCheck``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client.connection import ClientConfig
from rmq_spark.client.message import new_unique_keys
from rmq_spark.client.remoting.client import RemotingClient, tls_context
from rmq_spark.client.remoting.transport import RemotingConnection, raise_for
from rmq_spark.clock import now_ms
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import UNIQ_KEY, encode_properties
from rmq_spark.codec.record import TRANSACTION_PREPARED_TYPE
from rmq_spark.errors import RocketliteError, UnavailableError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting.codes import RequestCode
from rmq_spark.wire.remoting.frame import Command

log = logging.getLogger("rmq_spark.client.remoting")

__all__ = [
    "COMMIT",
    "ROLLBACK",
    "CheckListener",
    "CheckRequest",
    "HalfRef",
    "HalfSender",
    "end_halves",
]

TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
#: END_TRANSACTION's commitOrRollback values (RocketMQ's MessageSysFlag transaction types)
COMMIT = 8
ROLLBACK = 12
#: the sys flag of a half message (RocketMQ's MessageSysFlag prepared type)
_HALF_FLAG = str(TRANSACTION_PREPARED_TYPE)
#: requests written to a connection with one system call
_WRITE_TOGETHER = 128
_NOT_SENT: Future[Command] = Future()
_MIN_WINDOW = 64
#: how often the check listener heartbeats (a broker forgets a silent client after 120 s)
HEARTBEAT_S = 20.0


@dataclass(frozen=True)
class HalfRef:
    """Where a half message is: what END_TRANSACTION must name to end it."""

    #: its UNIQ_KEY: END_TRANSACTION's msgId and transactionId
    key: str
    broker: str
    #: the real topic and queue the message goes to when committed
    topic: str
    queue_id: int
    commit_log_offset: int
    #: its queue offset in the broker's half topic (tranStateTableOffset)
    queue_offset: int

    def to_json(self) -> list[str | int]:
        return [
            self.key,
            self.broker,
            self.topic,
            self.queue_id,
            self.commit_log_offset,
            self.queue_offset,
        ]

    @classmethod
    def from_json(cls, item: Sequence[str | int]) -> HalfRef:
        key, broker, topic, queue_id, clo, qo = item
        return cls(str(key), str(broker), str(topic), int(queue_id), int(clo), int(qo))


class _Wire:
    """One connection per broker address, requests signed when the config has a key."""

    def __init__(
        self, config: ClientConfig, on_request: Callable[[str, Command], None] | None = None
    ) -> None:
        self.config = config
        self._tls = tls_context(config)
        self._on_request = on_request
        self._lock = threading.Lock()
        self._connections: dict[str, RemotingConnection] = {}

    def connection(self, address: str) -> RemotingConnection:
        with self._lock:
            conn = self._connections.get(address)
            if conn is None:
                hook = None
                if self._on_request is not None:
                    on_request = self._on_request

                    def hook(command: Command, _address: str = address) -> None:
                        on_request(_address, command)

                conn = RemotingConnection(address, tls=self._tls, on_request=hook)
                self._connections[address] = conn
            return conn

    def signed(self, code: int, ext: dict[str, str], body: bytes = b"") -> Command:
        access_key, secret_key = self.config.access_key, self.config.secret_key
        if access_key and secret_key:
            ext = sign_request(ext, body, access_key, secret_key)
        return Command(code, ext, body)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            conn.close()


@dataclass
class _Sent:
    mq: MessageQueue
    address: str
    request: Command
    future: Future[Command]
    key: str


class HalfSender:
    """Sends half messages of producer group ``group``, up to ``window`` in flight;
    :meth:`finish` waits for every answer and returns the half messages' coordinates in
    the order they were sent."""

    def __init__(self, client: RemotingClient, group: str, *, window: int = 512) -> None:
        self.client = client
        self.group = group
        self.window = window
        self._wire = _Wire(client.config)
        self._in_flight: deque[_Sent] = deque()
        self.halves: list[HalfRef] = []

    def send(self, mq: MessageQueue, body: bytes, fields: dict[str, str]) -> str:
        """Send one half message to ``mq`` (its properties ``fields``; a UNIQ_KEY is added
        when missing); returns its UNIQ_KEY."""
        return self.send_many(mq, [body], [fields])[0]

    def send_many(
        self, mq: MessageQueue, bodies: Sequence[bytes], fields: Sequence[dict[str, str]]
    ) -> list[str]:
        """Send half messages to ``mq``, one request each, written to the connection
        together; returns their UNIQ_KEYs."""
        address = self.client.address_of(mq)
        fresh = iter(new_unique_keys(len(bodies)))
        born = str(now_ms())
        sent = []
        for body, item in zip(bodies, fields, strict=True):
            item = dict(item)
            key = item.get(UNIQ_KEY) or item.setdefault(UNIQ_KEY, next(fresh))
            item[TRAN_MSG] = "true"
            item[PGROUP] = self.group
            ext = {
                "a": self.group,
                "b": mq.topic,
                "c": "TBW102",
                "d": "4",
                "e": str(mq.queue_id),
                "f": _HALF_FLAG,
                "g": born,
                "h": "0",
                "i": encode_properties(item).decode(),
                "j": "0",
                "k": "false",
            }
            request = self._wire.signed(RequestCode.SEND_MESSAGE_V2, ext, body)
            sent.append(_Sent(mq, address, request, _NOT_SENT, key))
        conn = self._wire.connection(address)
        for start in range(0, len(sent), _WRITE_TOGETHER):
            chunk = sent[start : start + _WRITE_TOGETHER]
            while self._in_flight and len(self._in_flight) + len(chunk) > self.window:
                self._settle(self._in_flight.popleft())
            futures = conn.submit_many([s.request for s in chunk])
            for one, future in zip(chunk, futures, strict=True):
                one.future = future
            self._in_flight.extend(chunk)
        return [s.key for s in sent]

    def finish(self) -> list[HalfRef]:
        while self._in_flight:
            self._settle(self._in_flight.popleft())
        return self.halves

    def _settle(self, sent: _Sent) -> None:
        what = f"half message to {sent.mq}"
        timeout_s = self.client.config.request_timeout_s
        delays = self.client.config.retry.delays_s()
        while True:
            try:
                answer = _answer(self._wire, sent, timeout_s)
                raise_for(answer, what)
                break
            except RocketliteError as exc:
                # a half message sent twice is harmless: the copy nobody records is rolled
                # back when the broker asks about it
                delay = next(delays, None)
                if not exc.retriable or delay is None:
                    raise
                # a RocketMQ broker answers "busy" when requests waited 200 ms in its send
                # queue: fewer in flight from here on
                self.window = max(_MIN_WINDOW, self.window // 2)
                time.sleep(delay)
                request = Command(sent.request.code, dict(sent.request.ext), sent.request.body)
                sent.request = request
                sent.future = self._wire.connection(sent.address).submit(request)
        offset_id = answer.ext.get("msgId", "")
        self.halves.append(
            HalfRef(
                sent.key,
                sent.mq.broker_name,
                sent.mq.topic,
                sent.mq.queue_id,
                commit_log_offset(offset_id),
                int(answer.ext["queueOffset"]),
            )
        )

    def close(self) -> None:
        self._wire.close()


def _answer(wire: _Wire, sent: _Sent, timeout_s: float) -> Command:
    try:
        return sent.future.result(timeout_s)
    except FutureTimeout:
        wire.connection(sent.address).forget(sent.request)
        raise UnavailableError(
            f"{sent.address} did not answer a send to {sent.mq} within {timeout_s:g} s"
        ) from None


def commit_log_offset(offset_msg_id: str) -> int:
    """The commit-log offset an offset message id holds (its last 8 bytes).

    >>> commit_log_offset("7F00000100002A9F00000000000000FF")
    255
    """
    if len(offset_msg_id) < 16:
        raise UnavailableError(f"the broker answered the offset message id {offset_msg_id!r}")
    return int(offset_msg_id[-16:], 16)


def end_request(
    wire: _Wire,
    group: str,
    half: HalfRef,
    resolution: int,
    *,
    from_check: bool = False,
) -> Command:
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.commit_log_offset),
        "commitOrRollback": str(resolution),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": half.key,
        "transactionId": half.key,
    }
    return wire.signed(RequestCode.END_TRANSACTION, ext)


def end_halves(
    client: RemotingClient,
    group: str,
    halves: Iterable[HalfRef],
    resolution: int,
    *,
    ordered: bool = False,
    window: int = 512,
) -> None:
    """End ``halves`` with ``resolution`` (COMMIT or ROLLBACK). With ``ordered`` the halves
    of one queue are ended one after the other, in the given order, so they are written to
    it in that order (RocketMQ ends transactions on a pool of threads); queues go in
    parallel. A commit that fails, or whose answer does not come, raises and is not sent
    again: whether it was applied is found later (a commit applied twice shows twice)."""
    wire = _Wire(client.config)
    timeout_s = client.config.request_timeout_s
    try:
        if ordered:
            lanes: dict[tuple[str, str, int], list[HalfRef]] = {}
            for half in halves:
                lanes.setdefault((half.broker, half.topic, half.queue_id), []).append(half)
            pending: deque[tuple[Future[Command], Command, str, HalfRef, list[HalfRef]]] = deque()

            def start(lane: list[HalfRef]) -> None:
                half = lane.pop(0)
                address = _address(client, half)
                request = end_request(wire, group, half, resolution)
                pending.append(
                    (wire.connection(address).submit(request), request, address, half, lane)
                )

            for lane in lanes.values():
                start(lane)
            while pending:
                future, request, address, half, lane = pending.popleft()
                _check_end(wire, future, request, address, half, resolution, timeout_s)
                if lane:
                    start(lane)
            return
        flight: deque[tuple[Future[Command], Command, str, HalfRef]] = deque()
        listed = list(halves)
        for first in range(0, len(listed), _WRITE_TOGETHER):
            chunk = listed[first : first + _WRITE_TOGETHER]
            while flight and len(flight) + len(chunk) > window:
                _check_end(wire, *flight.popleft(), resolution, timeout_s)
            by_address: dict[str, list[tuple[Command, HalfRef]]] = {}
            for half in chunk:
                request = end_request(wire, group, half, resolution)
                by_address.setdefault(_address(client, half), []).append((request, half))
            for address, items in by_address.items():
                futures = wire.connection(address).submit_many([r for r, _ in items])
                for (request, half), future in zip(items, futures, strict=True):
                    flight.append((future, request, address, half))
        while flight:
            _check_end(wire, *flight.popleft(), resolution, timeout_s)
    finally:
        wire.close()


def _address(client: RemotingClient, half: HalfRef) -> str:
    return client.address_of(MessageQueue(half.topic, half.broker, half.queue_id))


def _check_end(
    wire: _Wire,
    future: Future[Command],
    request: Command,
    address: str,
    half: HalfRef,
    resolution: int,
    timeout_s: float,
) -> None:
    what = "commit" if resolution == COMMIT else "rollback"
    try:
        answer = future.result(timeout_s)
    except FutureTimeout:
        wire.connection(address).forget(request)
        raise UnavailableError(
            f"{address} did not answer the {what} of half message {half.key} within {timeout_s:g} s"
        ) from None
    raise_for(answer, f"{what} of half message {half.key} on broker {half.broker!r}")


@dataclass(frozen=True)
class CheckRequest:
    """A broker's CHECK_TRANSACTION_STATE: the half message it asks about (this copy's
    coordinates: RocketMQ writes a half message again each time it checks it) and its
    properties."""

    address: str
    half: HalfRef
    properties: dict[str, str]


#: a check's answer: COMMIT, ROLLBACK, or None for unknown (nothing is sent)
CheckHandler = Callable[[CheckRequest], int | None]


class CheckListener:
    """A live producer of ``group``: it heartbeats to every address :meth:`watch` names, and
    answers each CHECK_TRANSACTION_STATE a broker sends it with ``handler``'s answer."""

    def __init__(self, config: ClientConfig, group: str, handler: CheckHandler) -> None:
        self.group = group
        self.handler = handler
        self.client_id = f"{socket.gethostname()}@{os.getpid()}#{time.monotonic_ns()}"
        self._wire = _Wire(config, on_request=self._on_request)
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="rocketlite-tx-check")
        self._addresses: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timeout_s = config.request_timeout_s
        self.checks = 0
        self.last_check_ms = 0
        self._beater = threading.Thread(
            target=self._heartbeats, name="rocketlite-tx-heartbeat", daemon=True
        )
        self._beater.start()

    def watch(self, addresses: Iterable[str]) -> None:
        """Heartbeat to these brokers too (at once, then every HEARTBEAT_S)."""
        with self._lock:
            new = set(addresses) - self._addresses
            self._addresses |= new
        for address in sorted(new):
            self._beat(address)

    def _heartbeats(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                addresses = sorted(self._addresses)
            for address in addresses:
                self._beat(address)

    def _beat(self, address: str) -> None:
        body = json.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [],
                "producerDataSet": [{"groupName": self.group}],
            }
        ).encode()
        try:
            answer = self._wire.connection(address).call(
                self._wire.signed(RequestCode.HEART_BEAT, {}, body), self._timeout_s
            )
            raise_for(answer, f"heartbeat to {address}")
        except RocketliteError as exc:
            log.info("producer group %s: heartbeat to %s failed: %s", self.group, address, exc)

    def _on_request(self, address: str, command: Command) -> None:
        if command.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        body = bytes(command.body)  # the frame's buffer is reused once this returns
        self._pool.submit(self._check, address, command.ext, body)

    def _check(self, address: str, ext: dict[str, str], body: bytes) -> None:
        self.checks += 1
        self.last_check_ms = now_ms()
        try:
            record = decode_records(body, columns=["topic", "queueId", "properties"])
            properties = dict(record.column("properties")[0].as_py() or ())
            key = ext.get("msgId") or ext.get("transactionId") or properties.get(UNIQ_KEY, "")
            half = HalfRef(
                key,
                ext.get("bname", ""),
                str(ext.get("topic") or record.column("topic")[0].as_py()),
                int(record.column("queueId")[0].as_py()),
                int(ext["commitLogOffset"]),
                int(ext["tranStateTableOffset"]),
            )
            answer = self.handler(CheckRequest(address, half, properties))
            if answer is None:
                return
            request = end_request(self._wire, self.group, half, answer, from_check=True)
            # RocketMQ sends this oneway; an answer (when the broker gives one) is only logged
            self._wire.connection(address).oneway(request)
        except Exception:
            log.exception(
                "producer group %s: answering a check from %s failed", self.group, address
            )

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            addresses = sorted(self._addresses)
        for address in addresses:
            try:
                self._wire.connection(address).oneway(
                    self._wire.signed(
                        RequestCode.UNREGISTER_CLIENT,
                        {"clientID": self.client_id, "producerGroup": self.group},
                    )
                )
            except RocketliteError:
                pass
        self._pool.shutdown(wait=True)
        self._wire.close()
