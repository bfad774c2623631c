"""The Spark source's offsets: the *next* offset to read in every queue it reads.

In memory an offset is ``dict[MessageQueue, int]``. Spark stores it in the query's offset log
as JSON, so it crosses the Python Data Source API as a nested dict of primitives::

    {"orders": {"broker-a": {"0": 42, "1": 40}}}      # topic -> broker name -> queue id

JSON keys are strings, so queue ids are written as canonical decimal strings. Spark decides
"no new data" by comparing these documents as text, so :func:`to_json_dict` always emits
topics, brokers and queues in the same (sorted, queue ids numerically) order.

User options (``startingOffsets``, ``endingOffsets``) use the same shape, where, as in
Spark's Kafka source, ``-2`` means "earliest" and ``-1`` means "latest" for that queue.

>>> mq = MessageQueue("orders", "broker-a", 0)
>>> to_json_dict({mq: 42})
{'orders': {'broker-a': {'0': 42}}}
>>> from_json_dict({"orders": {"broker-a": {"0": 42}}}) == {mq: 42}
True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from rmq_spark.errors import InvalidArgumentError, InvalidNameError, NotFoundError
from rmq_spark.names import validate_topic
from rmq_spark.offsets.json_codec import MAX_OFFSET, MAX_QUEUE_ID
from rmq_spark.structs import MessageQueue

#: in a user option: start (or end) at the queue's earliest offset, like Kafka's -2
EARLIEST = -2
#: in a user option: start (or end) at the queue's latest offset, like Kafka's -1
LATEST = -1

Offsets = dict[MessageQueue, int]
OffsetsJson = dict[str, dict[str, dict[str, int]]]

#: how many queues a data-loss message lists before summarising the rest
_MAX_LISTED = 10


def to_json_dict(offsets: Mapping[MessageQueue, int]) -> OffsetsJson:
    """The JSON-able form, in a stable order: topics, brokers, then queue ids numerically."""
    result: OffsetsJson = {}
    for mq in sorted(offsets):
        # Refuse what from_json_dict would refuse: Spark must be able to hand it back.
        if _queue_id(str(mq.queue_id)) != mq.queue_id or not mq.broker_name.strip():
            raise InvalidArgumentError(f"{mq.describe()} is not a valid queue")
        validate_topic(mq.topic, allow_system=True)
        offset = _check_offset(offsets[mq], mq.describe())
        result.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = offset
    return result


def from_json_dict(obj: Any, what: str = "offset") -> Offsets:
    """Validate Spark's offset document (next offsets, all >= 0) and convert it.

    ``what`` starts every error message, e.g. the option the document came from.
    """
    return _parse_tree(obj, what, _check_offset)


def parse_offsets_json(
    text: str,
    option_name: str,
    *,
    allow_earliest: bool = True,
    allow_latest: bool = True,
) -> Offsets:
    """Parse a user option such as ``startingOffsets``; -2 / -1 stay in the result.

    Resolve them with :func:`resolve_special` once the queues' offsets are known.

    >>> parse_offsets_json('{"orders": {"broker-a": {"0": 5, "1": -2}}}', "startingOffsets")
    {MessageQueue(topic='orders', broker_name='broker-a', queue_id=0): 5, \
MessageQueue(topic='orders', broker_name='broker-a', queue_id=1): -2}
    """
    specials = {EARLIEST: allow_earliest, LATEST: allow_latest}

    def check(value: object, where: str) -> int:
        if _is_int(value) and value in specials:
            if not specials[value]:
                name = "earliest" if value == EARLIEST else "latest"
                raise InvalidArgumentError(
                    f"{where}: {value} ({name}) is not allowed in {option_name}"
                )
            return value
        allowed = [str(v) for v, ok in specials.items() if ok]
        return _check_offset(value, where, extra=allowed)

    return _parse_tree(_load_json(text, option_name), option_name, check)


def parse_timestamps_json(text: str, option_name: str) -> Offsets:
    """Parse ``{topic: {broker: {queueId: epoch ms}}}`` (``startingOffsetsByTimestamp``)."""

    def check(value: object, where: str) -> int:
        if not _is_int(value) or value < 0:
            raise InvalidArgumentError(
                f"{where}: timestamp {value!r} is not milliseconds since the epoch (an "
                "integer >= 0)"
            )
        return value

    return _parse_tree(_load_json(text, option_name), option_name, check)


def resolve_special(
    requested: Mapping[MessageQueue, int],
    earliest: Mapping[MessageQueue, int],
    latest: Mapping[MessageQueue, int],
    what: str = "offsets",
) -> Offsets:
    """Replace -2 by the queue's earliest and -1 by its latest offset.

    Raises NotFoundError when a queue with a special value is missing from the lookups.
    """
    result: Offsets = {}
    for mq, offset in requested.items():
        table = earliest if offset == EARLIEST else latest if offset == LATEST else None
        if table is None:
            result[mq] = offset
        elif mq in table:
            result[mq] = table[mq]
        else:
            raise NotFoundError(
                f"{what}: {mq.describe()} does not exist on the broker; check the topic's queues"
            )
    return result


def merge(*offsets: Mapping[MessageQueue, int]) -> Offsets:
    """One mapping with every queue; for a queue in several, the last mapping wins."""
    result: Offsets = {}
    for mapping in offsets:
        result.update(mapping)
    return result


def advance(start: Mapping[MessageQueue, int], ends: Mapping[MessageQueue, int]) -> Offsets:
    """``start`` moved forward to ``ends``; queues only in ``ends`` are added.

    Moving a queue backwards is a planning bug and raises InvalidArgumentError.
    """
    behind = [mq for mq, end in ends.items() if mq in start and end < start[mq]]
    if behind:
        mq = min(behind)
        raise InvalidArgumentError(
            f"cannot move {mq.describe()} back from offset {start[mq]} to {ends[mq]}; "
            "end offsets must not be below start offsets"
        )
    return merge(start, ends)


@dataclass(frozen=True)
class DataLoss:
    """One queue where messages the query expected to read are gone.

    ``kind``: ``"reset"`` when the queue now ends before ``expected`` (topic re-created,
    store replaced), ``"shrunk"`` when it now ends at ``found``, below the end ``expected``
    it had before (re-created: its messages are not the ones the query was reading, even
    where their offsets go on), ``"vanished"`` when the queue no longer exists,
    ``"deleted"`` when retention removed messages ``expected`` .. ``found - 1`` before they
    were read.
    """

    mq: MessageQueue
    kind: Literal["reset", "shrunk", "vanished", "deleted"]
    expected: int
    found: int | None = None

    def describe(self) -> str:
        where = self.mq.describe()
        if self.kind == "vanished":
            return f"{where}: the queue no longer exists (next offset to read was {self.expected})"
        if self.kind == "shrunk":
            return (
                f"{where}: the queue now ends at offset {self.found}, below offset "
                f"{self.expected} that it held before (was the topic re-created?); its "
                "messages are not the ones this query was reading, so they are read from "
                "the queue's first message, never as the continuation of the old ones"
            )
        if self.kind == "reset":
            return (
                f"{where}: the queue now ends at offset {self.found}, before the next offset "
                f"to read {self.expected} (was the topic re-created or the store replaced?)"
            )
        assert self.found is not None
        return (
            f"{where}: messages {self.expected}..{self.found - 1} were deleted before they "
            f"were read ({self.found - self.expected} messages; the queue now starts at "
            f"{self.found})"
        )


def compare(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int]) -> list[DataLoss]:
    """Queues of ``start`` that went backwards in (or vanished from) ``end``, sorted.

    ``end`` is usually the brokers' latest offsets: a queue ending before the offset the
    query is about to read means the messages it did read are no longer there.
    """
    losses: list[DataLoss] = []
    for mq in sorted(start):
        if mq not in end:
            losses.append(DataLoss(mq, "vanished", start[mq]))
        elif end[mq] < start[mq]:
            losses.append(DataLoss(mq, "reset", start[mq], end[mq]))
    return losses


def deleted_before_read(
    start: Mapping[MessageQueue, int], earliest: Mapping[MessageQueue, int]
) -> list[DataLoss]:
    """Queues whose earliest available offset is past the next offset to read, sorted."""
    return [
        DataLoss(mq, "deleted", start[mq], earliest[mq])
        for mq in sorted(start)
        if mq in earliest and earliest[mq] > start[mq]
    ]


def data_loss_message(losses: Iterable[DataLoss], *, fail_on_data_loss: bool) -> str:
    """The text of the error (``failOnDataLoss=true``) or warning (false) for ``losses``."""
    items = list(losses)
    lines = [f"  {loss.describe()}" for loss in items[:_MAX_LISTED]]
    if len(items) > _MAX_LISTED:
        lines.append(f"  ... and {len(items) - _MAX_LISTED} more queues")
    if fail_on_data_loss:
        advice = (
            "Some data may have been lost. If this is acceptable, set the source option "
            "failOnDataLoss to 'false' to skip the lost range and continue."
        )
    else:
        advice = (
            "Some data may have been lost; continuing because failOnDataLoss is 'false'. "
            "Set it to 'true' to stop the query instead."
        )
    return "\n".join([advice, *lines])


def _parse_tree(obj: Any, what: str, check: Callable[[object, str], int]) -> Offsets:
    if not isinstance(obj, dict):
        raise InvalidArgumentError(
            f"{what}: expected a JSON object {{topic: {{brokerName: {{queueId: offset}}}}}}, "
            f"got {_short(obj)}"
        )
    result: Offsets = {}
    for topic, brokers in obj.items():
        try:
            validate_topic(topic, allow_system=True)
        except InvalidNameError as exc:
            raise InvalidNameError(f"{what}: {exc}") from None
        if not isinstance(brokers, dict):
            raise InvalidArgumentError(
                f"{what}: topic {topic!r} must map broker names to objects, got {_short(brokers)}"
            )
        for broker, queues in brokers.items():
            _parse_queues(topic, broker, queues, what, check, result)
    return result


def _parse_queues(
    topic: str,
    broker: object,
    queues: object,
    what: str,
    check: Callable[[object, str], int],
    result: Offsets,
) -> None:
    if not isinstance(broker, str) or not broker.strip():
        raise InvalidArgumentError(f"{what}: topic {topic!r} has an empty broker name")
    where = f"{what}: topic {topic!r} broker {broker!r}"
    if not isinstance(queues, dict):
        raise InvalidArgumentError(f"{where} must map queue ids to integers, got {_short(queues)}")
    for queue_text, value in queues.items():
        queue_id = _queue_id(queue_text)
        if queue_id is None:
            raise InvalidArgumentError(
                f"{where} queue {queue_text!r} is not a queue id (a whole number "
                f'0..{MAX_QUEUE_ID} written as a string, e.g. "0")'
            )
        result[MessageQueue(topic, broker, queue_id)] = check(value, f"{where} queue {queue_id}")


def _check_offset(value: object, where: str, extra: Iterable[str] = ()) -> int:
    if _is_int(value) and 0 <= value <= MAX_OFFSET:
        return value
    allowed = " or ".join([f"an integer in 0..{MAX_OFFSET}", *extra])
    raise InvalidArgumentError(f"{where}: offset {value!r} is not {allowed}")


def _load_json(text: str, option_name: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        dupes = sorted({key for key in keys if keys.count(key) > 1})
        if dupes:
            raise InvalidArgumentError(f"{option_name}: key {dupes[0]!r} appears twice")
        return dict(pairs)

    if not isinstance(text, str):
        raise InvalidArgumentError(f"{option_name} must be a JSON string, got {_short(text)}")
    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(
            f"{option_name} is not valid JSON ({exc.msg} at character {exc.pos}): "
            f"{_short(text)}; expected {{topic: {{brokerName: {{queueId: offset}}}}}}"
        ) from None


def _queue_id(text: object) -> int | None:
    # Only the canonical spelling ("7", not "07" or "+7"), so two keys never mean one queue.
    if not isinstance(text, str) or not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if str(number) == text and number <= MAX_QUEUE_ID else None


def _is_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass; true as an offset is a mistake, not offset 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
