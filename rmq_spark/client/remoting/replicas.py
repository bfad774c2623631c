"""Which replica of a RocketMQ broker group a request goes to. Pure.

A broker group (one ``brokerName``) is a master (broker id 0) and its slaves (ids 1, 2...),
each at its own address, as a route's ``brokerAddrs`` lists them. Writes and offset commits
go to the master only. Reads (pulls, offsets, searches by time, committed offsets, key
look-ups) go where RocketMQ's Java client sends them: to the replica the queue's last pull
answer suggested (``suggestWhichBrokerId``; the master unless a broker with
``slaveReadEnable`` says otherwise), else the next id after it, else the master, else any
replica in id order; a replica the client saw fail a moment ago is passed over while
another is live.

>>> read_node({0: "m:10911", 1: "s:10921"}, suggested=0, down=set())
(0, 'm:10911')
>>> read_node({0: "m:10911", 1: "s:10921"}, suggested=0, down={"m:10911"})
(1, 's:10921')
>>> read_node({1: "s:10921"}, suggested=0, down=set())
(1, 's:10921')
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

__all__ = ["MASTER_ID", "commit_node", "read_node", "read_order"]

#: RocketMQ's broker id of a group's master (MixAll.MASTER_ID)
MASTER_ID = 0


def read_order(replicas: Mapping[int, str], suggested: int) -> list[int]:
    """The broker ids a read tries, best first: the suggested one, the one after it (a
    suggested slave's sibling, as Java's client looks it up), then every replica in id
    order (the master first). Ids the group does not have are left out."""
    wanted = [suggested]
    if suggested != MASTER_ID:
        wanted.append(suggested + 1)
    wanted += sorted(replicas)
    order: list[int] = []
    for broker_id in wanted:
        if broker_id in replicas and broker_id not in order:
            order.append(broker_id)
    return order


def read_node(
    replicas: Mapping[int, str], suggested: int, down: Collection[str]
) -> tuple[int, str] | None:
    """``(broker id, address)`` of the replica a read goes to: the first of
    :func:`read_order` whose address is not ``down``; None when no replica is live (or the
    group has none)."""
    for broker_id in read_order(replicas, suggested):
        address = replicas[broker_id]
        if address not in down:
            return broker_id, address
    return None


def commit_node(replicas: Mapping[int, str], down: Collection[str]) -> str | None:
    """The address an offset commit goes to: the master's, when the route names it and it
    is not ``down``; None otherwise (a slave's copy of the offsets follows the master's)."""
    address = replicas.get(MASTER_ID)
    if address is None or address in down:
        return None
    return address
