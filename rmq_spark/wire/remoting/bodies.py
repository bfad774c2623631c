"""JSON bodies of the remoting protocol, in the forms RocketMQ's clients and tools parse.

Written compact (no spaces: the Go client splits address maps on ``,`` and ``:``) and in
standard JSON with quoted keys, which fastjson, Go, C++ and ali-ons all read. The one
exception is a map keyed by message queue (consume and topic statistics): fastjson writes
those with a JSON object as the key, and ``mqadmin`` reads them only in that form.

>>> route_data("broker-a", "127.0.0.1:9876", "DefaultCluster", [("broker-a", 4, 4, 6)])
'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:9876"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting.frame import is_text

#: MixAll.MASTER_ID: the key of a broker's master address in brokerAddrs
MASTER_ID = "0"


def json_object(body: bytes | bytearray | memoryview, what: str) -> dict:
    """A request's JSON object body (a heartbeat's, a lock request's), read once.
    InvalidArgumentError when it is not JSON, not an object, or holds a string that is not
    valid Unicode text (invalid UTF-8, or a lone surrogate escape), naming where."""
    try:
        data = json.loads(bytes(body).decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as exc:
        raise InvalidArgumentError(f"the {what} body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"the {what} body is not a JSON object")
    where = _bad_text(data, what)
    if where is not None:
        raise InvalidArgumentError(f"{where} is not valid Unicode text")
    return data


def _bad_text(value: object, where: str) -> str | None:
    """The path of the first string in ``value`` that is not valid text, or None."""
    pending = [(value, where)]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            if not is_text(item):
                return path
        elif isinstance(item, dict):
            for key, inner in item.items():
                if not is_text(key):
                    return f"a key of {path}"
                pending.append((inner, f"{path}.{key}"))
        elif isinstance(item, list):
            pending.extend((inner, f"{path}[{i}]") for i, inner in enumerate(item))
    return None


def dumps(value: object) -> str:
    """Compact JSON, keys sorted as fastjson's MapSortField writes them."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def broker_data(broker_name: str, address: str, cluster: str) -> dict:
    return {
        "brokerAddrs": {MASTER_ID: address},
        "brokerName": broker_name,
        "cluster": cluster,
        "enableActingMaster": False,
    }


def route_data(
    broker_name: str,
    address: str,
    cluster: str,
    queue_datas: Iterable[tuple[str, int, int, int]],
) -> str:
    """A TopicRouteData body: ``queue_datas`` are (brokerName, read queues, write queues,
    perm), one per broker holding the topic; every one is joined to its address by name."""
    return dumps(
        {
            "brokerDatas": [broker_data(broker_name, address, cluster)],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": name,
                    "perm": perm,
                    "readQueueNums": read,
                    "topicSysFlag": 0,
                    "writeQueueNums": write,
                }
                for name, read, write, perm in queue_datas
            ],
        }
    )


def cluster_info(broker_name: str, address: str, cluster: str) -> str:
    return dumps(
        {
            "brokerAddrTable": {broker_name: broker_data(broker_name, address, cluster)},
            "clusterAddrTable": {cluster: [broker_name]},
        }
    )


def mq_keyed(table: Mapping[MessageQueue, Mapping[str, object]], **fields: object) -> str:
    """An object whose ``offsetTable`` maps message queues (as fastjson's object keys) to
    objects, plus ``fields``: ConsumeStats and TopicStatsTable bodies."""
    entries = ",".join(
        dumps({"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic})
        + ":"
        + dumps(value)
        for mq, value in sorted(table.items())
    )
    rest = "".join(f",{dumps(name)}:{dumps(value)}" for name, value in sorted(fields.items()))
    return "{" + f'"offsetTable":{{{entries}}}' + rest + "}"
