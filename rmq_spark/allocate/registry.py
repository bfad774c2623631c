"""Strategies by name, so the push consumer and the Spark planner build the same one."""

from __future__ import annotations

import inspect

from rmq_spark.allocate.avg import AllocateMessageQueueAveragely
from rmq_spark.allocate.avg_by_circle import AllocateMessageQueueAveragelyByCircle
from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.allocate.config import AllocateMessageQueueByConfig
from rmq_spark.allocate.consistent_hash import AllocateMessageQueueConsistentHash
from rmq_spark.allocate.machine_room import AllocateMessageQueueByMachineRoom
from rmq_spark.errors import InvalidArgumentError

StrategyClass = type[AllocateMessageQueueStrategy]

#: canonical names of the built-in strategies
STRATEGIES: tuple[str, ...] = ("avg", "avgByCircle", "consistentHash", "machineRoom", "config")

_by_key: dict[str, StrategyClass] = {}
_by_name: dict[str, StrategyClass] = {}


def _key(name: str) -> str:
    # "AVG_BY_CIRCLE", "avg-by-circle" and "avgByCircle" are one name
    return name.replace("_", "").replace("-", "").lower()


def register_strategy(cls: StrategyClass) -> StrategyClass:
    """Make ``cls`` available to :func:`get_strategy` by its ``name`` and ``aliases``.

    Usable as a class decorator; registering the same class again is a no-op.

    >>> @register_strategy
    ... class Nothing(AllocateMessageQueueStrategy):
    ...     name = "nothing"
    ...     def allocate_sorted(self, consumer_group, current_cid, mq_all, cid_all):
    ...         return []
    >>> type(get_strategy("NOTHING")).__name__
    'Nothing'
    """
    if not (isinstance(cls, type) and issubclass(cls, AllocateMessageQueueStrategy)):
        raise InvalidArgumentError(
            f"{cls!r} is not an AllocateMessageQueueStrategy subclass; subclass it and "
            "implement allocate_sorted"
        )
    if inspect.isabstract(cls):
        raise InvalidArgumentError(
            f"{cls.__name__} is abstract; implement {sorted(cls.__abstractmethods__)}"
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _key(name):
        raise InvalidArgumentError(
            f"{cls.__name__}.name is {name!r}; set a class attribute name = '<unique name>'"
        )
    keys = {_key(n) for n in (name, *cls.aliases)}
    for key in sorted(keys):
        taken = _by_key.get(key)
        if taken is not None and taken is not cls:
            raise InvalidArgumentError(
                f"cannot register {cls.__name__} as {name!r}: the name or alias {key!r} "
                f"already belongs to {taken.__name__} ({taken.name!r}); choose another"
            )
    for key in keys:
        _by_key[key] = cls
    _by_name[name] = cls
    return cls


def strategy_names() -> tuple[str, ...]:
    """Canonical names of every registered strategy, built-in ones first."""
    return tuple(_by_name)


def get_strategy(name: str, **kwargs: object) -> AllocateMessageQueueStrategy:
    """Build the strategy registered as ``name`` (case, '_' and '-' ignored) with ``kwargs``.

    >>> get_strategy("AVG_BY_CIRCLE")
    AllocateMessageQueueAveragelyByCircle()
    >>> get_strategy("consistentHash", virtual_nodes=20)
    AllocateMessageQueueConsistentHash(virtual_nodes=20, hash_fn='md5_64')
    """
    cls = _by_key.get(_key(name)) if isinstance(name, str) else None
    if cls is None:
        raise InvalidArgumentError(
            f"unknown allocate strategy {name!r}; valid names: {', '.join(strategy_names())}"
        )
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(
            f"allocate strategy {cls.name!r} cannot take options {sorted(kwargs)}: {exc}; "
            f"its signature is {cls.__name__}{inspect.signature(cls)}"
        ) from None
    return cls(**kwargs)


for _cls in (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueByConfig,
):
    register_strategy(_cls)
