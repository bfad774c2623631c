"""The allocation strategy ABC and the input checks every strategy shares.

RocketMQ rebalances without a coordinator: every member of a consumer group runs the same
strategy on the same view (all queues of the topic, all consumer ids of the group) and keeps
only its own share. That works only if every member sees the inputs in the same order, so
the base class sorts them before a strategy looks at them.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import ClassVar

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

log = logging.getLogger(__name__)


class AllocateMessageQueueStrategy(ABC):
    """Decides which queues of one topic one consumer of a group owns.

    Subclasses set ``name`` and implement :meth:`allocate_sorted`; :meth:`allocate` checks
    and sorts the inputs first, so callers may pass them in any order.

    >>> from rmq_spark.allocate import AllocateMessageQueueAveragely
    >>> mqs = [MessageQueue("t", "broker-a", i) for i in range(3)]
    >>> AllocateMessageQueueAveragely().allocate("g", "c2", mqs, ["c2", "c1"])
    [MessageQueue(topic='t', broker_name='broker-a', queue_id=2)]
    """

    #: unique name used by the registry and in logs, e.g. ``"avg"``
    name: ClassVar[str]
    #: other names the registry accepts (compared ignoring case, '_' and '-')
    aliases: ClassVar[tuple[str, ...]] = ()

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        """Return the queues ``current_cid`` owns, ascending; ``[]`` if it is not a member.

        Raises :class:`InvalidArgumentError` for an empty ``current_cid``, ``mq_all`` or
        ``cid_all``, for duplicates, and for values of the wrong type.
        """
        if not isinstance(current_cid, str) or not current_cid:
            raise InvalidArgumentError(
                f"current_cid is empty ({current_cid!r}); pass this consumer's client id"
            )
        mqs = sorted_queues(mq_all, "mq_all")
        cids = sorted_consumer_ids(cid_all)
        if current_cid not in cids:
            log.info(
                "consumer group %r: consumer id %r not in cid_all %s; strategy %s allocates "
                "it nothing until the next rebalance",
                consumer_group,
                current_cid,
                list(cids),
                self.name,
            )
            return []
        return self.allocate_sorted(consumer_group, current_cid, mqs, cids)

    @abstractmethod
    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        """The strategy proper. Inputs are checked, duplicate-free and sorted, and
        ``current_cid`` is in ``cid_all``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def sorted_queues(mq_all: Iterable[MessageQueue] | None, what: str) -> tuple[MessageQueue, ...]:
    """Check a collection of queues and return it sorted by (topic, broker_name, queue_id).

    >>> sorted_queues([MessageQueue("t", "b", 1), MessageQueue("t", "a", 7)], "mq_all")[0]
    MessageQueue(topic='t', broker_name='a', queue_id=7)
    """
    mqs = tuple(mq_all or ())
    if not mqs:
        raise InvalidArgumentError(
            f"{what} is empty; pass at least one MessageQueue (check the topic's route)"
        )
    for i, mq in enumerate(mqs):
        _check_queue(mq, f"{what}[{i}]")
    _reject_duplicates(mqs, what, "queue")
    return tuple(sorted(mqs))


def sorted_consumer_ids(cid_all: Iterable[str] | None) -> tuple[str, ...]:
    """Check the group's consumer ids and return them in Java ``String`` order.

    Java clients sort with ``String.compareTo`` (UTF-16 code units); sorting by the
    UTF-16-BE bytes gives the same order, so mixed Java/Python groups agree even for ids with
    characters beyond U+FFFF (plain ``sorted`` would order those by code point).

    >>> sorted_consumer_ids(["c2", "c10", "c1"])
    ('c1', 'c10', 'c2')
    """
    cids = tuple(cid_all or ())
    if not cids:
        raise InvalidArgumentError(
            "cid_all is empty; pass the client ids of every consumer in the group, "
            "including this one"
        )
    for i, cid in enumerate(cids):
        if not isinstance(cid, str) or not cid:
            raise InvalidArgumentError(
                f"cid_all[{i}] is {cid!r}; every consumer id must be a non-empty string"
            )
    _reject_duplicates(cids, "cid_all", "consumer id")
    return tuple(sorted(cids, key=_java_order))


def _java_order(cid: str) -> bytes:
    return cid.encode("utf-16-be", "surrogatepass")


def _check_queue(mq: object, where: str) -> None:
    if not isinstance(mq, MessageQueue):
        raise InvalidArgumentError(
            f"{where} is {mq!r} ({type(mq).__name__}), not a MessageQueue; "
            "build queues with MessageQueue(topic, broker_name, queue_id)"
        )
    topic, broker_name, queue_id = mq
    if (
        not isinstance(topic, str)
        or not isinstance(broker_name, str)
        or not isinstance(queue_id, int)
        or isinstance(queue_id, bool)
    ):
        raise InvalidArgumentError(
            f"{where} is {mq!r}; topic and broker_name must be str and queue_id an int"
        )


def _reject_duplicates(values: tuple, what: str, kind: str) -> None:
    dupes = sorted(v for v, n in Counter(values).items() if n > 1)
    if dupes:
        raise InvalidArgumentError(
            f"{what} has duplicate {kind}s {dupes}; pass each {kind} once "
            "(deduplicate the route or member list first)"
        )
