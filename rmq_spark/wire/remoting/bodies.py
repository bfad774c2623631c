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
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rmq_spark.codec import fastjson
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


def broker_data(broker_name: str, address: str | Mapping[int, str], cluster: str) -> dict:
    """A BrokerData: ``address`` is the master's, or every address by broker id (0 is the
    master, others are slaves)."""
    addresses = {0: address} if isinstance(address, str) else address
    return {
        "brokerAddrs": {str(broker_id): addr for broker_id, addr in sorted(addresses.items())},
        "brokerName": broker_name,
        "cluster": cluster,
        "enableActingMaster": False,
    }


#: one QueueData: (brokerName, read queues, write queues, perm), or with topicSysFlag last
QueueRow = tuple[str, int, int, int] | tuple[str, int, int, int, int]
#: one BrokerData: (cluster, brokerName, {brokerId: address})
BrokerRow = tuple[str, str, Mapping[int, str]]


def topic_route(queue_datas: Iterable[QueueRow], broker_datas: Iterable[BrokerRow]) -> str:
    """A TopicRouteData body from its QueueDatas and BrokerDatas (joined by broker name)."""
    return dumps(
        {
            "brokerDatas": [
                broker_data(name, dict(addresses), cluster)
                for cluster, name, addresses in broker_datas
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": row[0],
                    "perm": row[3],
                    "readQueueNums": row[1],
                    "topicSysFlag": row[4] if len(row) > 4 else 0,
                    "writeQueueNums": row[2],
                }
                for row in queue_datas
            ],
        }
    )


def route_data(
    broker_name: str,
    address: str,
    cluster: str,
    queue_datas: Iterable[tuple[str, int, int, int]],
) -> str:
    """A TopicRouteData body of one broker: ``queue_datas`` are (brokerName, read queues,
    write queues, perm), each joined to its address by name."""
    return topic_route(queue_datas, [(cluster, broker_name, {0: address})])


def cluster_table(broker_datas: Iterable[BrokerRow]) -> str:
    """A ClusterInfo body: every broker by name, and the broker names of each cluster."""
    brokers: dict[str, dict] = {}
    clusters: dict[str, list[str]] = {}
    for cluster, name, addresses in broker_datas:
        brokers[name] = broker_data(name, dict(addresses), cluster)
        clusters.setdefault(cluster, []).append(name)
    return dumps(
        {
            "brokerAddrTable": brokers,
            "clusterAddrTable": {cluster: sorted(names) for cluster, names in clusters.items()},
        }
    )


def cluster_info(broker_name: str, address: str, cluster: str) -> str:
    return cluster_table([(cluster, broker_name, {0: address})])


# -- a broker's registration with a name server (REGISTER_BROKER) ---------------------------


@dataclass(frozen=True)
class TopicConfigRow:
    """One topic of a broker's registration: RocketMQ's TopicConfig."""

    topic: str
    read_queues: int
    write_queues: int
    perm: int
    sys_flag: int = 0
    order: bool = False


@dataclass(frozen=True)
class BrokerTopics:
    """What a broker registers: its topic table and the DataVersion that names it (the
    name server takes the topics again only when the version moved)."""

    timestamp_ms: int
    counter: int
    topics: tuple[TopicConfigRow, ...]


#: Deflater output inflated at most to this (a registration of 100,000 topics is ~15 MB)
MAX_INFLATED_BYTES = 256 << 20
_INT = struct.Struct(">i")


def body_crc32(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ's ``bodyCrc32`` header of a registration: CRC-32 of the body, sign bit off."""
    return zlib.crc32(body) & 0x7FFFFFFF


def register_broker_body(registration: BrokerTopics) -> bytes:
    """A RegisterBrokerBody as RocketMQ 4.9's brokers send it uncompressed (their default):
    the topic config wrapper (topics by name, DataVersion) and an empty filter-server list."""
    return dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {
                    "counter": registration.counter,
                    "timestamp": registration.timestamp_ms,
                },
                "topicConfigTable": {
                    row.topic: {
                        "order": row.order,
                        "perm": row.perm,
                        "readQueueNums": row.read_queues,
                        "topicFilterType": "SINGLE_TAG",
                        "topicName": row.topic,
                        "topicSysFlag": row.sys_flag,
                        "writeQueueNums": row.write_queues,
                    }
                    for row in registration.topics
                },
            },
        }
    ).encode()


def read_register_broker_body(
    body: bytes | bytearray | memoryview, *, compressed: bool, wrapped: bool = True
) -> BrokerTopics:
    """The topics and DataVersion of a REGISTER_BROKER body: RegisterBrokerBody JSON (a
    broker of RocketMQ 3.0.11 or later), its Deflater form (``compressed``, a broker with
    compressedRegister), or a bare TopicConfigSerializeWrapper (``wrapped=False``, older
    brokers). InvalidArgumentError says what is wrong."""
    if compressed:
        return _read_compressed(bytes(body))
    data = _json(bytes(body), "the registration body")
    if wrapped:
        data = data.get("topicConfigSerializeWrapper") if isinstance(data, dict) else None
    if not isinstance(data, dict):
        raise InvalidArgumentError("the registration body holds no topic config wrapper")
    timestamp, counter = _data_version(data.get("dataVersion") or {})
    table = data.get("topicConfigTable")
    table = {} if table is None else table
    if not isinstance(table, dict):
        raise InvalidArgumentError("the registration's topicConfigTable is not an object")
    rows = tuple(_topic_row(name, config) for name, config in table.items())
    return BrokerTopics(timestamp, counter, rows)


def _json(data: bytes, what: str) -> object:
    """Standard JSON, else fastjson's dialect (number keys unquoted), which Java writes."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        pass
    try:
        return fastjson.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidArgumentError(f"{what} is not JSON: {exc}") from None


def _data_version(version: object) -> tuple[int, int]:
    if not isinstance(version, dict):
        raise InvalidArgumentError(f"the registration's dataVersion {version!r} is not an object")
    timestamp, counter = version.get("timestamp", 0), version.get("counter", 0)
    if not isinstance(timestamp, int) or not isinstance(counter, int):
        raise InvalidArgumentError(
            f"the registration's dataVersion {dumps(version)} holds no whole-number "
            "timestamp and counter"
        )
    return timestamp, counter


def _topic_row(name: object, config: object) -> TopicConfigRow:
    if not isinstance(config, dict):
        raise InvalidArgumentError(f"the registered config of topic {name!r} is not an object")
    topic = config.get("topicName", name)
    numbers = [config.get(k, 16) for k in ("readQueueNums", "writeQueueNums")]
    numbers += [config.get("perm", 6), config.get("topicSysFlag", 0)]
    if not isinstance(topic, str) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in numbers
    ):
        raise InvalidArgumentError(f"the registered config of topic {name!r} is malformed")
    read, write, perm, sys_flag = numbers
    return TopicConfigRow(topic, read, write, perm, sys_flag, config.get("order") is True)


def _read_compressed(body: bytes) -> BrokerTopics:
    """RegisterBrokerBody's Deflater layout: [int length, DataVersion JSON], [int count],
    count x [int length, TopicConfig text "name read write perm filterType"], then
    [int length, filter server list JSON]."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, MAX_INFLATED_BYTES)
    except zlib.error as exc:
        raise InvalidArgumentError(f"the compressed registration does not inflate: {exc}") from None
    if inflater.unconsumed_tail:
        raise InvalidArgumentError(
            f"the compressed registration inflates to more than {MAX_INFLATED_BYTES} bytes"
        )
    pos = 0

    def chunk(what: str) -> bytes:
        nonlocal pos
        if len(data) - pos < 4:
            raise InvalidArgumentError(f"the compressed registration is cut short in {what}")
        (length,) = _INT.unpack_from(data, pos)
        if length < 0 or len(data) - pos - 4 < length:
            raise InvalidArgumentError(f"the compressed registration is cut short in {what}")
        pos += 4 + length
        return data[pos - length : pos]

    timestamp, counter = _data_version(_json(chunk("its DataVersion"), "its DataVersion"))
    if len(data) - pos < 4:
        raise InvalidArgumentError("the compressed registration is cut short in its topic count")
    (count,) = _INT.unpack_from(data, pos)
    pos += 4
    rows = []
    for i in range(max(count, 0)):
        fields = chunk(f"topic config {i}").decode("utf-8", "replace").split(" ")
        if len(fields) != 5 or not all(f.isdigit() for f in fields[1:4]):
            raise InvalidArgumentError(
                f"topic config {i} of the compressed registration is not "
                f"'name read write perm filterType': {' '.join(fields)!r}"
            )
        rows.append(TopicConfigRow(fields[0], int(fields[1]), int(fields[2]), int(fields[3])))
    return BrokerTopics(timestamp, counter, tuple(rows))


def compressed_register_broker_body(registration: BrokerTopics) -> bytes:
    """The Deflater form of :func:`register_broker_body` (a broker with compressedRegister)."""
    version = dumps({"counter": registration.counter, "timestamp": registration.timestamp_ms})
    parts = [_INT.pack(len(version)), version.encode(), _INT.pack(len(registration.topics))]
    for row in registration.topics:
        text = f"{row.topic} {row.read_queues} {row.write_queues} {row.perm} SINGLE_TAG".encode()
        parts += [_INT.pack(len(text)), text]
    parts += [_INT.pack(2), b"[]"]
    return zlib.compress(b"".join(parts), 9)


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
