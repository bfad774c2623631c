"""Queue allocation (rebalance) strategies: which queues of a topic each consumer owns.

One implementation shared by the push consumer and the Spark planner; look strategies up by
name with :func:`get_strategy`.

>>> from rmq_spark.structs import MessageQueue
>>> mqs = [MessageQueue("t", "broker-a", i) for i in range(8)]
>>> [mq.queue_id for mq in get_strategy("avg").allocate("g", "c1", mqs, ["c1", "c2", "c3"])]
[0, 1, 2]
"""

from rmq_spark.allocate.avg import AllocateMessageQueueAveragely
from rmq_spark.allocate.avg_by_circle import AllocateMessageQueueAveragelyByCircle
from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.allocate.config import AllocateMessageQueueByConfig
from rmq_spark.allocate.consistent_hash import (
    AllocateMessageQueueConsistentHash,
    md5_64,
    queue_key,
)
from rmq_spark.allocate.machine_room import AllocateMessageQueueByMachineRoom
from rmq_spark.allocate.registry import (
    STRATEGIES,
    get_strategy,
    register_strategy,
    strategy_names,
)

__all__ = [
    "STRATEGIES",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "get_strategy",
    "md5_64",
    "queue_key",
    "register_strategy",
    "strategy_names",
]
