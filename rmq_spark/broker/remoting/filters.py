"""RocketMQ's answers about a consumer group's filter over remoting. Pure.

RocketMQ's push consumer pulls without its subscription (no PULL_SUBSCRIPTION flag): the
broker filters by what the group's heartbeats carried. The broker core decides that filter
for every front-end (:meth:`~rmq_spark.broker.membership.groups.ConsumerRegistry.group_filter`:
the live members' newest subscription, read once); this module turns it into what the pull
reads with, or into RocketMQ's refusal (:func:`group_read`). Expressions that cannot be
used become RocketMQ's answers in one place (:func:`refusal`): SQL92 on a broker started
with ``--no-property-filter`` SYSTEM_ERROR (1) with RocketMQ's remark, anything else the
core's table (a malformed expression SUBSCRIPTION_PARSE_FAILED, 23, naming the column and
why).

>>> from rmq_spark.broker.membership.filters import TopicFilter
>>> group_read(TopicFilter("orders", "TAG", "*", 5), 9, "g", "orders")
(None, None)
"""

from __future__ import annotations

from rmq_spark.broker.membership.filters import TopicFilter
from rmq_spark.broker.remoting.answers import Refusal, response_code
from rmq_spark.errors import FilterNotSupportedError, RocketliteError
from rmq_spark.filter import TAG, Selector
from rmq_spark.wire.remoting.codes import FILTER_NOT_SUPPORTED, ResponseCode


def group_read(
    found: TopicFilter, pull_version: int, group: str, topic: str
) -> tuple[list[int] | None, Selector | None]:
    """The tag codes or the selector a pull without its subscription reads with, given the
    group's filter of the topic and the version the pull names; otherwise the
    :class:`Refusal` RocketMQ answers: SYSTEM_ERROR (1) when the broker does not filter by
    that type, FILTER_DATA_NOT_EXIST (27) when the expression could not be compiled,
    FILTER_DATA_NOT_LATEST (28) when the pull names a newer subscription than the heartbeats
    gave (the client subscribed again and has not heartbeated since)."""
    if found.kind == TAG:
        return found.tag_codes, None
    where = f"the {found.kind} filter of group {group!r} on topic {topic!r}"
    if isinstance(found.error, FilterNotSupportedError):
        raise refusal(found.kind, found.error)
    if found.error is not None or found.selector is None:
        raise Refusal(
            ResponseCode.FILTER_DATA_NOT_EXIST,
            f"{where} does not exist: its heartbeat's expression could not be compiled "
            f"({found.error}); subscribe with a valid expression",
        )
    if found.version < pull_version:
        raise Refusal(
            ResponseCode.FILTER_DATA_NOT_LATEST,
            f"{where} is version {found.version}, older than the pull's subscription "
            f"(version {pull_version}); the next heartbeat brings it",
        )
    return None, found.selector


def refusal(kind: str, error: RocketliteError) -> Refusal:
    """RocketMQ's answer when an expression of ``kind`` cannot be used: SYSTEM_ERROR (1)
    with RocketMQ's remark when the broker does not filter by it, else the core's table's
    code (SUBSCRIPTION_PARSE_FAILED, 23, for an expression that cannot be read) saying
    where and why."""
    if isinstance(error, FilterNotSupportedError):
        return Refusal(ResponseCode.SYSTEM_ERROR, f"{FILTER_NOT_SUPPORTED}{kind}: {error}")
    return Refusal(response_code(error), str(error))
