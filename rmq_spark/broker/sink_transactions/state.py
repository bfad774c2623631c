"""The Spark sink's transactions without I/O: names, the marks a staged record carries, the
decision of :func:`plan_end` (what ending a batch commits, rolls back and records), and the
expiry of abandoned transactions (:func:`expired`).
:mod:`.service` (and :mod:`.sends`, for the rows of one send) does the I/O.

A sink (one streaming query, or one batch job) writes each micro-batch as transactions: a
Spark task's rows on one broker are one transaction, staged invisibly by one or more sends
(numbered from 0). The driver ends the batch with a *decision*: for every broker, the
transactions that make up the batch and how many messages each staged. The first broker
asked records the decision with the batch id; asking again for the same batch (a replay
after the driver died) gets the recorded decision back and commits nothing new, so the
batch's rows become visible once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rmq_spark.codec import properties as props
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import SINK_HALF_TOPIC

#: the staging queue: every sink's pending rows, queue 0
HALF_TOPIC = SINK_HALF_TOPIC

SINK_ID = "SINK_ID"
SINK_TXN = "SINK_TXN"
SINK_SEQ = "SINK_SEQ"
SINK_COUNT = "SINK_COUNT"

#: broker name -> [(transaction id, messages staged)], in the caller's order
Decision = dict[str, list[tuple[str, int]]]


def stage_marks(
    sink_id: str,
    transaction_id: str,
    sequence: int,
    topic: str,
    queue_id: int,
    delay: int,
    count: int,
) -> bytes:
    """The properties the first record of one staged send (``count`` records in a row in
    the staging queue) carries after its own; they are stripped again when the records are
    committed. The other records carry only their own."""
    fields = {
        SINK_ID: sink_id,
        SINK_TXN: transaction_id,
        SINK_SEQ: str(sequence),
        SINK_COUNT: str(count),
        props.REAL_TOPIC: topic,
        props.REAL_QID: str(queue_id),
    }
    if delay:
        fields[props.DELAY] = str(delay)
    return props.encode_properties(fields)


@dataclass(frozen=True)
class StageMark:
    sink_id: str
    transaction_id: str
    sequence: int
    topic: str
    queue_id: int
    delay: int
    count: int

    def marks(self) -> bytes:
        return stage_marks(
            self.sink_id,
            self.transaction_id,
            self.sequence,
            self.topic,
            self.queue_id,
            self.delay,
            self.count,
        )


def parse_marks(fields: Mapping[str, str]) -> StageMark | None:
    """The marks of a staged send's first record; None for any other record."""
    try:
        return StageMark(
            sink_id=fields[SINK_ID],
            transaction_id=fields[SINK_TXN],
            sequence=int(fields[SINK_SEQ]),
            topic=fields[props.REAL_TOPIC],
            queue_id=int(fields[props.REAL_QID]),
            delay=int(fields.get(props.DELAY, "0")),
            count=int(fields[SINK_COUNT]),
        )
    except (KeyError, ValueError):
        return None


def expired(oldest_ms: Mapping[str, int], *, now_ms: int, timeout_ms: int) -> list[str]:
    """The transactions to roll back for age: those whose oldest send (``oldest_ms`` maps a
    pending transaction to the time its first send was stored) is more than ``timeout_ms``
    old, in the mapping's order."""
    return [txn for txn, at_ms in oldest_ms.items() if now_ms - at_ms > timeout_ms]


@dataclass
class SinkRecord:
    """What a broker remembers of a sink: its last committed batch and that batch's
    decision."""

    batch: int
    decision: Decision
    at_ms: int

    def to_json(self) -> dict:
        return {"batch": self.batch, "decision": self.decision, "atMs": self.at_ms}

    @classmethod
    def from_json(cls, obj: dict) -> SinkRecord:
        decision = {
            str(broker): [(str(txn), int(n)) for txn, n in parts]
            for broker, parts in obj["decision"].items()
        }
        return cls(int(obj["batch"]), decision, int(obj.get("atMs", 0)))


@dataclass
class EndPlan:
    """What ending a batch does on one broker."""

    already: bool
    #: the decision the broker holds for the batch after the call (empty for a rollback)
    decision: Decision
    commit: list[str] = field(default_factory=list)
    rollback: list[str] = field(default_factory=list)
    #: the sink's record to keep, when it changes
    record: SinkRecord | None = None


def plan_end(
    record: SinkRecord | None,
    pending: Mapping[str, int],
    *,
    batch_id: int,
    commit: bool,
    decision: Decision,
    broker_name: str,
    now_ms: int,
) -> EndPlan:
    """Decide how one broker ends batch ``batch_id`` of a sink.

    ``record`` is what the broker remembers of the sink; ``pending`` maps the sink's
    pending transactions on this broker to the messages each staged. Raises
    InvalidArgumentError, changing nothing, when a commit names a transaction this broker
    does not hold with that count (rows were lost, or the transaction was already ended).
    """
    if not commit:
        return EndPlan(already=False, decision={}, rollback=sorted(pending))
    if record is not None and record.batch > batch_id:
        # An older batch than the last committed one: it was committed long ago.
        return EndPlan(already=True, decision={})
    if record is not None and record.batch == batch_id:
        mine = {txn for txn, _ in record.decision.get(broker_name, [])}
        return EndPlan(
            already=True,
            decision=record.decision,
            commit=sorted(txn for txn in pending if txn in mine),
            rollback=sorted(txn for txn in pending if txn not in mine),
        )
    mine_counts = decision.get(broker_name, [])
    for txn, count in mine_counts:
        held = pending.get(txn)
        if held is None:
            raise InvalidArgumentError(
                f"transaction {txn!r} is not pending on broker {broker_name}: it was rolled "
                "back (the sink's transaction timeout, or an abort) or never staged here; "
                "the batch cannot be committed and must be written again"
            )
        if held != count:
            raise InvalidArgumentError(
                f"transaction {txn!r} staged {held} messages on broker {broker_name}, the "
                f"commit counts {count} (rows lost by a broker restart?); the batch cannot "
                "be committed and must be written again"
            )
    mine = {txn for txn, _ in mine_counts}
    return EndPlan(
        already=False,
        decision=decision,
        commit=[txn for txn, _ in mine_counts],
        rollback=sorted(txn for txn in pending if txn not in mine),
        record=SinkRecord(batch_id, decision, now_ms),
    )
