"""What each request of RocketMQ's remoting protocol needs: ONE table, ``RULES``, keyed by
request code, the remoting counterpart of :mod:`.permissions` (same :class:`Need`s, same
ACL). A request whose code is not in the table is refused for everyone but super users.

Rules read a request's header fields (``ext``, by RocketMQ's names; a send's one-letter names
too) and, for heartbeats and lock requests, its JSON body; they know nothing else of the
protocol.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rmq_spark.auth.acl import Resource
from rmq_spark.auth.permissions import PUB, PUB_OR_SUB, SUB, SUB_OR_GET, Need
from rmq_spark.auth.remoting_signature import Buffer
from rmq_spark.names import RETRY_PREFIX
from rmq_spark.remoting.codes import RequestCode as C

Extract = Callable[[Mapping[str, str], Buffer], Iterable[Need]]
#: RocketMQ's topic for routes of topics made on first use
AUTO_CREATE_TOPIC = "TBW102"


@dataclass(frozen=True)
class RemotingRule:
    #: only super users may send it (changes or reveals broker-wide state)
    super_only: bool = False
    needs: Extract | None = None
    #: client ids the request names, bound to the caller
    client_ids: Callable[[Mapping[str, str], Buffer], Iterable[str]] | None = None


def _topic(*names: str, actions=SUB) -> Extract:
    def extract(ext, body) -> list[Need]:
        name = next((ext[n] for n in names if ext.get(n)), "")
        if not name:
            return []
        if name.startswith(RETRY_PREFIX):  # a consumer's retry topic: its group's
            return [Need(Resource.group(name[len(RETRY_PREFIX) :]), SUB)]
        return [Need(Resource.topic(name), actions)]

    return extract


def _group(*names: str) -> Extract:
    def extract(ext, body) -> list[Need]:
        name = next((ext[n] for n in names if ext.get(n)), "")
        return [Need(Resource.group(name), SUB)] if name else []

    return extract


def _both(*extracts: Extract) -> Extract:
    return lambda ext, body: [need for extract in extracts for need in extract(ext, body)]


def _json(body: Buffer) -> dict:
    try:
        data = json.loads(bytes(body))
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _route(ext, body) -> list[Need]:
    """A right on the topic; the auto-creation topic's route (a producer's fallback for a
    topic not made yet) only needs a login."""
    if ext.get("topic") == AUTO_CREATE_TOPIC:
        return []
    return list(_topic("topic", actions=PUB_OR_SUB)(ext, body))


def _heartbeat(ext, body) -> list[Need]:
    """Each consumer group it joins, and each topic they subscribe to (retry topics are
    their group's)."""
    needs = []
    for consumer in _json(body).get("consumerDataSet") or []:
        if not isinstance(consumer, dict):
            continue
        needs.append(Need(Resource.group(str(consumer.get("groupName", ""))), SUB))
        for sub in consumer.get("subscriptionDataSet") or []:
            topic = str(sub.get("topic", "")) if isinstance(sub, dict) else ""
            if topic and not topic.startswith(RETRY_PREFIX):
                needs.append(Need(Resource.topic(topic), SUB))
    return needs


def _lock_body(ext, body) -> list[Need]:
    data = _json(body)
    needs = [Need(Resource.group(str(data.get("consumerGroup", ""))), SUB)]
    for mq in data.get("mqSet") or []:
        topic = str(mq.get("topic", "")) if isinstance(mq, dict) else ""
        if topic:
            needs.append(Need(Resource.topic(topic), SUB))
    return needs


def _heartbeat_client(ext, body) -> list[str]:
    return [str(_json(body).get("clientID", ""))]


def _lock_client(ext, body) -> list[str]:
    return [str(_json(body).get("clientId", ""))]


_SEND = RemotingRule(needs=_topic("b", "topic", actions=PUB))
_PULL = RemotingRule(needs=_both(_topic("topic"), _group("consumerGroup")))
_QUEUE = RemotingRule(needs=_topic("topic"))
_AUTHENTICATED = RemotingRule()
_SUPER = RemotingRule(super_only=True)

RULES: dict[int, RemotingRule] = {
    # name server role: finding brokers needs a right on the topic; lists need a login
    C.GET_ROUTEINFO_BY_TOPIC: RemotingRule(needs=_route),
    C.GET_BROKER_CLUSTER_INFO: _AUTHENTICATED,
    C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _AUTHENTICATED,
    C.GET_TOPICS_BY_CLUSTER: _AUTHENTICATED,
    C.GET_SYSTEM_TOPIC_LIST_FROM_NS: _AUTHENTICATED,
    # producing
    C.SEND_MESSAGE: _SEND,
    C.SEND_MESSAGE_V2: _SEND,
    C.SEND_BATCH_MESSAGE: _SEND,
    C.END_TRANSACTION: RemotingRule(needs=_topic("topic", actions=PUB)),
    # consuming
    C.PULL_MESSAGE: _PULL,
    C.LITE_PULL_MESSAGE: _PULL,
    C.QUERY_CONSUMER_OFFSET: _PULL,
    C.UPDATE_CONSUMER_OFFSET: _PULL,
    C.GET_MAX_OFFSET: _QUEUE,
    C.GET_MIN_OFFSET: _QUEUE,
    C.SEARCH_OFFSET_BY_TIMESTAMP: _QUEUE,
    C.GET_EARLIEST_MSG_STORETIME: _QUEUE,
    # messages by key: they are the topic's (RocketMQ 4.9's ACL asks Sub; 5.x Sub or Get)
    C.QUERY_MESSAGE: RemotingRule(needs=_topic("topic", actions=SUB_OR_GET)),
    C.CONSUMER_SEND_MSG_BACK: RemotingRule(needs=_group("group")),
    # groups
    C.HEART_BEAT: RemotingRule(needs=_heartbeat, client_ids=_heartbeat_client),
    C.UNREGISTER_CLIENT: RemotingRule(client_ids=lambda ext, body: [ext.get("clientID", "")]),
    C.GET_CONSUMER_LIST_BY_GROUP: RemotingRule(needs=_group("consumerGroup")),
    C.LOCK_BATCH_MQ: RemotingRule(needs=_lock_body, client_ids=_lock_client),
    C.UNLOCK_BATCH_MQ: RemotingRule(needs=_lock_body, client_ids=_lock_client),
    # what mqadmin reads about one topic or group: a right on it
    C.GET_TOPIC_CONFIG: RemotingRule(needs=_topic("topic", actions=PUB_OR_SUB)),
    C.GET_TOPIC_STATS_INFO: _QUEUE,
    C.QUERY_TOPIC_CONSUME_BY_WHO: RemotingRule(needs=_topic("topic", actions=SUB_OR_GET)),
    C.GET_CONSUME_STATS: RemotingRule(needs=_group("consumerGroup")),
    C.GET_CONSUMER_CONNECTION_LIST: RemotingRule(needs=_group("consumerGroup")),
    # broker-wide state, changes and a record by its commit-log position: super users
    C.UPDATE_AND_CREATE_TOPIC: _SUPER,
    C.DELETE_TOPIC_IN_BROKER: _SUPER,
    C.DELETE_TOPIC_IN_NAMESRV: _SUPER,
    C.PUT_KV_CONFIG: _SUPER,
    C.GET_KV_CONFIG: _SUPER,
    C.DELETE_KV_CONFIG: _SUPER,
    C.GET_KVLIST_BY_NAMESPACE: _SUPER,
    C.GET_ALL_TOPIC_CONFIG: _SUPER,
    C.GET_BROKER_RUNTIME_INFO: _SUPER,
    C.GET_ALL_CONSUMER_OFFSET: _SUPER,
    C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _SUPER,
    C.VIEW_MESSAGE_BY_ID: _SUPER,
}


def rule_for(code: int) -> RemotingRule:
    """The rule of a request code; unknown codes are for super users only."""
    return RULES.get(code, _SUPER)
