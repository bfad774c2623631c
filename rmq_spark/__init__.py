"""rocketlite: a RocketMQ-compatible message store, broker, client and Spark source."""

from rmq_spark.structs import MessageQueue

__version__ = "0.1.0"

__all__ = ["MessageQueue", "__version__"]
