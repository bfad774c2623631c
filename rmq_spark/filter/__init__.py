"""Message filters by property: RocketMQ's SQL92 selector, parsed once and applied to
whole batches (``TAGS`` is a property too). Tag subscriptions stay in
:mod:`rmq_spark.codec.subscription`; the broker, the clients and the Spark source all
select by SQL92 through :func:`compile_selector`."""

from rmq_spark.filter.selector import SQL92, TAG, Selector, compile_selector, tags_selector
from rmq_spark.filter.sql92_parse import SelectorError

__all__ = ["SQL92", "TAG", "Selector", "SelectorError", "compile_selector", "tags_selector"]
