"""Transactions without I/O: record shapes, pairing half messages with operations, and
which half messages a check is due for. :mod:`rmq_spark.broker.transactions.service` does the I/O.

A half message lives in ``RMQ_SYS_TRANS_HALF_TOPIC`` (queue 0) with ``REAL_TOPIC``,
``REAL_QID``, ``TRAN_MSG=true`` and its transaction id as ``UNIQ_KEY``. Every operation on
it is a record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` (queue 0) whose body is the half
message's queue offset in ASCII, as in RocketMQ; its tag says what it is:

* ``d`` (RocketMQ's remove tag): the half message is resolved; property ``TX_OUTCOME`` is
  ``COMMIT``, ``ROLLBACK`` or ``DISCARD``. A commit's op also records ``TX_REAL_FLOOR``, the
  real queue's max offset just before the committed copy was written there;
* ``c``: one transaction check was sent (the check count survives a restart).

Pairing the two queues gives the state back after any stop: a half message with no ``d``
op is pending; when one transaction id has several half messages the latest one counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from rmq_spark.codec import properties as props
from rmq_spark.codec.record import Record
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import TRANS_CHECK_MAX_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_TOPIC

HALF_TOPIC = TRANS_HALF_TOPIC
OP_TOPIC = TRANS_OP_TOPIC
CHECK_MAX_TOPIC = TRANS_CHECK_MAX_TOPIC

TRAN_MSG = "TRAN_MSG"
#: the client-given orphaned-transaction recovery duration, in whole seconds (RocketMQ's name)
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: how many checks were sent, on the copy handed to a producer (RocketMQ's name)
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TX_ID = "TX_ID"
#: the producer group of a transactional message (RocketMQ's name)
PRODUCER_GROUP = "PGROUP"
TX_OUTCOME = "TX_OUTCOME"
TX_REAL_FLOOR = "TX_REAL_FLOOR"

REMOVE_TAG = "d"
CHECK_TAG = "c"
COMMIT, ROLLBACK, DISCARD = "COMMIT", "ROLLBACK", "DISCARD"
PENDING = "PENDING"

#: a client-given check delay is capped at one hour (RocketMQ's transactionTimeOut cap)
MAX_CHECK_AFTER_MS = 3_600_000

#: half-message properties that the committed copy does not carry
_HALF_ONLY = (props.REAL_TOPIC, props.REAL_QID, CHECK_IMMUNITY, CHECK_TIMES)


@dataclass
class HalfState:
    """What the service keeps in memory for one pending half message."""

    transaction_id: str
    queue_offset: int  # in the half queue; ops name the half message by it
    physical_offset: int
    store_timestamp: int
    real_topic: str
    real_queue_id: int
    check_after_ms: int | None = None  # client-given (capped); None: the service default
    #: the producer group that began it (its PGROUP property; RocketMQ 5 clients send none)
    producer_group: str | None = None
    checks: int = 0
    last_check_ms: int | None = None


@dataclass
class OpEntry:
    half_offset: int
    tag: str
    op_offset: int
    store_timestamp: int
    transaction_id: str | None = None
    outcome: str | None = None
    real_floor: int | None = None


@dataclass
class Paired:
    """The state rebuilt from the two queues."""

    pending: dict[str, HalfState] = field(default_factory=dict)
    #: transaction id -> COMMIT / ROLLBACK / DISCARD, in op order
    resolved: dict[str, str] = field(default_factory=dict)
    #: commit ops at or after the verified op offset, with their half message
    commits_to_verify: list[tuple[OpEntry, HalfState]] = field(default_factory=list)


def half_properties(
    properties: bytes,
    *,
    topic: str,
    queue_id: int,
    tag: str | None,
    transaction_id: str,
    check_after_ms: int | None,
) -> bytes:
    """The half message's properties: the sender's plus the transaction's marks."""
    fields = props.decode_properties(properties)
    own = fields.get(props.UNIQ_KEY)
    if own and own != transaction_id:
        raise InvalidArgumentError(
            f"the message's UNIQ_KEY {own!r} differs from transaction id {transaction_id!r}; "
            "a transaction is named by its message's unique id"
        )
    fields[props.UNIQ_KEY] = transaction_id
    if tag and props.TAGS not in fields:
        fields[props.TAGS] = tag
    fields[props.REAL_TOPIC] = topic
    fields[props.REAL_QID] = str(queue_id)
    fields[TRAN_MSG] = "true"
    if check_after_ms is not None:
        fields[CHECK_IMMUNITY] = str(math.ceil(capped_check_after(check_after_ms) / 1000))
    return props.encode_properties(fields)


def check_end(
    half: HalfState,
    *,
    producer_group: str | None,
    commit_log_offset: int | None,
    half_queue_offset: int | None,
    topic: str | None,
) -> None:
    """RocketMQ's rule for ending a transaction: the request names the half message it ends
    by its producer group and its positions, and each value given must be the half
    message's (InvalidArgumentError names the one that is not). A half message without a
    producer group (a RocketMQ 5 client's) is ended by id alone.

    >>> half = HalfState("tx", 3, 900, 0, "T", 0, producer_group="pg")
    >>> check_end(half, producer_group="pg", commit_log_offset=900, half_queue_offset=3,
    ...           topic=None)
    >>> check_end(half, producer_group="pg", commit_log_offset=901, half_queue_offset=None,
    ...           topic=None)
    Traceback (most recent call last):
    ...
    rmq_spark.errors.InvalidArgumentError: transaction 'tx': commitLogOffset 901 is not ...
    """
    txid = half.transaction_id
    if half.producer_group is not None and producer_group != half.producer_group:
        raise InvalidArgumentError(
            f"transaction {txid!r} was begun by producer group {half.producer_group!r}, "
            f"not {producer_group!r}"
        )
    for name, given, actual in (
        ("commitLogOffset", commit_log_offset, half.physical_offset),
        ("tranStateTableOffset", half_queue_offset, half.queue_offset),
    ):
        if given is not None and given != actual:
            raise InvalidArgumentError(
                f"transaction {txid!r}: {name} {given} is not its half message's ({actual})"
            )
    if topic is not None and topic != half.real_topic:
        raise InvalidArgumentError(
            f"transaction {txid!r} belongs to topic {half.real_topic!r}, not {topic!r}"
        )


def capped_check_after(check_after_ms: int) -> int:
    if not isinstance(check_after_ms, int) or check_after_ms < 0:
        raise InvalidArgumentError(f"check_after_ms {check_after_ms!r} must be a whole number >= 0")
    return min(check_after_ms, MAX_CHECK_AFTER_MS)


def committed_properties(half_props: bytes) -> bytes:
    """The committed copy's properties: the half message's without REAL_TOPIC/REAL_QID and
    the check bookkeeping (TRAN_MSG and UNIQ_KEY stay)."""
    fields = props.decode_properties(half_props)
    for name in _HALF_ONLY:
        fields.pop(name, None)
    return props.encode_properties(fields)


def with_check_times(properties: bytes, checks: int) -> bytes:
    fields = props.decode_properties(properties)
    fields[CHECK_TIMES] = str(checks)
    return props.encode_properties(fields)


def op_properties(
    tag: str,
    transaction_id: str,
    outcome: str | None = None,
    real_floor: int | None = None,
) -> bytes:
    fields = {props.TAGS: tag, TX_ID: transaction_id}
    if outcome is not None:
        fields[TX_OUTCOME] = outcome
    if real_floor is not None:
        fields[TX_REAL_FLOOR] = str(real_floor)
    return props.encode_properties(fields)


def half_state(record: Record) -> HalfState | None:
    """The state of a stored half message; None when it lacks the transaction's marks."""
    fields = props.decode_properties(record.properties)
    txid = fields.get(props.UNIQ_KEY)
    topic = fields.get(props.REAL_TOPIC)
    qid = fields.get(props.REAL_QID, "")
    if not txid or not topic or not qid.isdigit():
        return None
    immunity = fields.get(CHECK_IMMUNITY, "")
    check_after = int(immunity) * 1000 if immunity.isdigit() else None
    return HalfState(
        transaction_id=txid,
        queue_offset=record.queue_offset,
        physical_offset=record.physical_offset,
        store_timestamp=record.store_timestamp,
        real_topic=topic,
        real_queue_id=int(qid),
        check_after_ms=None if check_after is None else min(check_after, MAX_CHECK_AFTER_MS),
        producer_group=fields.get(PRODUCER_GROUP) or None,
    )


def op_entry(record: Record) -> OpEntry | None:
    """The operation a stored op record states; None when it is not one."""
    text = record.body.decode("ascii", errors="replace").strip()
    if not text.isdigit():
        return None
    fields = props.decode_properties(record.properties)
    floor = fields.get(TX_REAL_FLOOR, "")
    return OpEntry(
        half_offset=int(text),
        tag=fields.get(props.TAGS, REMOVE_TAG),
        op_offset=record.queue_offset,
        store_timestamp=record.store_timestamp,
        transaction_id=fields.get(TX_ID),
        outcome=fields.get(TX_OUTCOME),
        real_floor=int(floor) if floor.isdigit() else None,
    )


def pair(halves: Iterable[HalfState], ops: Iterable[OpEntry], verified_op_offset: int) -> Paired:
    """Rebuild the pending set from the half messages and the ops, both in queue order."""
    by_offset: dict[int, HalfState] = {}
    latest: dict[str, HalfState] = {}
    for each in halves:
        by_offset[each.queue_offset] = each
        latest[each.transaction_id] = each
    out = Paired()
    removed: set[int] = set()
    for op in ops:
        half = by_offset.get(op.half_offset)
        if op.tag == CHECK_TAG:
            if half is not None:
                half.checks += 1
                half.last_check_ms = op.store_timestamp
            continue
        removed.add(op.half_offset)
        txid = op.transaction_id or (half.transaction_id if half else None)
        if txid is not None:
            out.resolved.pop(txid, None)  # keep op order: the latest outcome goes last
            out.resolved[txid] = op.outcome or COMMIT
        if op.outcome == COMMIT and op.op_offset >= verified_op_offset and half is not None:
            out.commits_to_verify.append((op, half))
    out.pending = {txid: half for txid, half in latest.items() if half.queue_offset not in removed}
    return out


def is_due(half: HalfState, now_ms: int, *, check_after_ms: int, check_interval_ms: int) -> bool:
    """A check is due once the half message is older than its check delay (its own, else the
    service's) and, after the first check, once ``check_interval_ms`` passed since the last."""
    wait = half.check_after_ms if half.check_after_ms is not None else check_after_ms
    if now_ms - half.store_timestamp < wait:
        return False
    return half.last_check_ms is None or now_ms - half.last_check_ms >= check_interval_ms


def plan_checks(
    pending: Iterable[HalfState],
    now_ms: int,
    *,
    check_after_ms: int,
    check_interval_ms: int,
    max_checks: int,
) -> tuple[list[HalfState], list[HalfState]]:
    """(to check now, to discard): the due half messages, oldest first. One that was already
    checked ``max_checks`` times is discarded instead of checked again."""
    due = sorted(
        (
            h
            for h in pending
            if is_due(h, now_ms, check_after_ms=check_after_ms, check_interval_ms=check_interval_ms)
        ),
        key=lambda h: h.queue_offset,
    )
    return [h for h in due if h.checks < max_checks], [h for h in due if h.checks >= max_checks]
