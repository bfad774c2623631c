"""The codecs of two of RocketMQ's files in a store's ``config/`` directory, in RocketMQ's
shapes, shared by the broker (which keeps them) and the store's offline readers:

* ``delayOffset.json``: how far the delay scheduler has delivered each delay level,
  ``{"offsetTable": {"<level>": offset}}``;
* ``subscriptionGroup.json``: consumer groups' settings,
  ``{"subscriptionGroupTable": {group: {...}}, "dataVersion": {...}}``.

>>> delay_offsets_to_json([5, 0])
{'offsetTable': {'1': 5, '2': 0}}
>>> groups_from_json({"subscriptionGroupTable": {"g": {"groupName": "g", "retryMaxTimes": 3}}})
{'g': {'groupName': 'g', 'retryMaxTimes': 3}}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rmq_spark.clock import now_ms
from rmq_spark.errors import CorruptDataError

DELAY_OFFSETS_FILE = "delayOffset.json"
#: the table of delayOffset.json
DELAY_TABLE_FIELD = "offsetTable"
SUBSCRIPTION_GROUPS_FILE = "subscriptionGroup.json"
GROUPS_TABLE_FIELD = "subscriptionGroupTable"


def delay_offsets_to_json(offsets: Sequence[int]) -> dict:
    """RocketMQ's delayOffset.json shape: ``{"offsetTable": {"<level>": offset}}``.

    >>> delay_offsets_to_json([5, 0])
    {'offsetTable': {'1': 5, '2': 0}}
    """
    return {DELAY_TABLE_FIELD: {str(qid + 1): offset for qid, offset in enumerate(offsets)}}


def delay_offsets_from_json(obj: Any) -> dict[int, int]:
    """Parse :func:`delay_offsets_to_json`'s shape to ``{level: offset}``; raises
    CorruptDataError naming the bad entry."""
    table = obj.get(DELAY_TABLE_FIELD) if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise CorruptDataError(f'expected a JSON object with a "{DELAY_TABLE_FIELD}" object inside')
    offsets = {}
    for level, offset in table.items():
        if not (isinstance(level, str) and level.isdigit() and int(level) >= 1):
            raise CorruptDataError(f"{DELAY_TABLE_FIELD} key {level!r} is not a delay level >= 1")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise CorruptDataError(f"delay level {level}: offset {offset!r} is not >= 0")
        offsets[int(level)] = offset
    return offsets


def new_group_entry(group: str, *, retry_max_times: int) -> dict[str, Any]:
    """A group's entry with the values Apache RocketMQ 4.9 gives a new group."""
    return {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": group,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": retry_max_times,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def groups_from_json(document: Any) -> dict[str, dict[str, Any]]:
    """The entries of a subscriptionGroup.json document; raises CorruptDataError naming
    what is wrong with its shape."""
    name = SUBSCRIPTION_GROUPS_FILE
    if not isinstance(document, dict):
        raise CorruptDataError(f"{name} must hold a JSON object, not {type(document).__name__}")
    table = document.get(GROUPS_TABLE_FIELD, {})
    if not isinstance(table, dict):
        raise CorruptDataError(f"{name}: {GROUPS_TABLE_FIELD} must be an object")
    for group, entry in table.items():
        if not isinstance(entry, dict):
            raise CorruptDataError(f"{name}: the entry of group {group!r} is not an object")
        limit = entry.get("retryMaxTimes", 16)
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise CorruptDataError(
                f"{name}: group {group!r} has retryMaxTimes {limit!r}, not a whole number"
            )
    return {str(group): dict(entry) for group, entry in table.items()}


def groups_to_json(groups: dict[str, dict[str, Any]], version: int) -> dict[str, Any]:
    return {
        GROUPS_TABLE_FIELD: {group: groups[group] for group in sorted(groups)},
        "dataVersion": {"counter": version, "timestamp": now_ms()},
    }
