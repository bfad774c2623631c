"""What a request of RocketMQ's remoting protocol needs, said over its DECODED value.

The broker decodes each request once, into the values it will act on; a
:class:`RemotingRule` reads those same values (never the raw header fields), so the topic
that is checked is the topic that is written, the group checked is the group committed for.
Each endpoint of the broker's remoting front-end declares its rule beside its decoder; this
module holds only the vocabulary they share with :mod:`.permissions` (the same
:class:`Need`s, the same ACL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rmq_spark.auth.acl import Resource
from rmq_spark.auth.permissions import SUB, Need
from rmq_spark.names import RETRY_PREFIX


@dataclass(frozen=True)
class RemotingRule:
    #: only super users may send it (changes or reveals broker-wide state)
    super_only: bool = False
    #: the rights the decoded request needs (none: a login is enough)
    needs: Callable[[Any], Iterable[Need]] | None = None
    #: client ids the decoded request names, bound to the caller
    client_ids: Callable[[Any], Iterable[str]] | None = None
    #: whether the decoded request reveals broker-wide state (super users only), when that
    #: depends on what it asks for
    super_only_if: Callable[[Any], bool] | None = None


#: anyone who is logged in
LOGIN = RemotingRule()
#: super users only
SUPER = RemotingRule(super_only=True)


def topic_need(topic: str, actions: frozenset) -> list[Need]:
    """A right on ``topic``; a consumer's retry topic is its group's (Sub on the group)."""
    if not topic:
        return []
    if topic.startswith(RETRY_PREFIX):
        return [Need(Resource.group(topic[len(RETRY_PREFIX) :]), SUB)]
    return [Need(Resource.topic(topic), actions)]


def group_need(group: str, actions: frozenset = SUB) -> list[Need]:
    return [Need(Resource.group(group), actions)] if group else []
