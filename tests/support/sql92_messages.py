"""One set of messages with properties, and SQL92 selectors over them, for the tests of
SQL92 filters over RocketMQ's remoting protocol: the same messages are stored in a
rocketlite broker and (with ``ROCKETMQ_HOME``) in Apache RocketMQ, and each selector's
deliveries compared.

Every message has a unique body ``m-<seq>`` and a ``seq`` property; the others come and
go, and some values are traps for a number comparison (``abc``, ``10.5`` against a whole
number: RocketMQ fails the message, it is never delivered).
"""

from __future__ import annotations

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue

COUNT = 48
QUEUES = 4

#: selectors both brokers accept, covering numbers, strings, IN, BETWEEN, IS NULL,
#: AND/OR/NOT and TAGS
SELECTORS = (
    "price > 20",
    "region = 'eu'",
    "region IN ('eu', 'ap')",
    "region NOT IN ('eu')",
    "price BETWEEN 10 AND 30",
    "price NOT BETWEEN 10 AND 30",
    "region IS NULL",
    "region IS NOT NULL AND price <= 15",
    "(region = 'us' OR TAGS = 'TagA') AND NOT (price > 25)",
    "TAGS IN ('TagB', 'TagC') AND flag = TRUE",
    "score > 1.0 OR region <> 'us'",
    "price = 9 OR region = 'eu'",
    "seq >= 40 AND TAGS IS NOT NULL",
)


def properties(seq: int) -> dict[str, str]:
    """The properties of message ``seq`` (TAGS among them when it has a tag)."""
    props = {"seq": str(seq)}
    tag = ("TagA", "TagB", "TagC", None)[seq % 4]
    if tag is not None:
        props["TAGS"] = tag
    region = ("eu", "us", "ap", None, "eu", "us")[seq % 6]
    if region is not None:
        props["region"] = region
    if seq % 11 == 5:
        pass  # no price
    elif seq % 7 == 3:
        props["price"] = "abc"
    elif seq % 13 == 4:
        props["price"] = "10.5"
    else:
        props["price"] = str(seq * 3 % 40)
    props["score"] = str((seq % 5) * 0.5)
    flag = ("true", "false", None)[seq % 3]
    if flag is not None:
        props["flag"] = flag
    return props


def body(seq: int) -> bytes:
    return f"m-{seq}".encode()


def send_all(client: RemotingClient, topic: str, broker_name: str) -> None:
    """Store the messages, message ``seq`` in queue ``seq % QUEUES``, in order."""
    for seq in range(COUNT):
        mq = MessageQueue(topic, broker_name, seq % QUEUES)
        client.send(mq, [body(seq)], [properties(seq)])


# -- the orders of the rocketlite.v1 and RocketMQ 5 tests ---------------------------------

#: (body, tag, properties) of the orders those tests send
ORDERS = [
    (
        f"order-{i}".encode(),
        "Paid" if i % 2 else "Open",
        {"region": "eu" if i % 3 == 0 else "us", "amount": str(i * 30)},
    )
    for i in range(12)
]
BIG_EU = "region = 'eu' AND amount > 100"  # orders 6 and 9
PAID_EU = "TAGS = 'Paid' AND region = 'eu'"  # orders 3 and 9
MALFORMED = "region = 'eu' AND amount >"  # column 27: the selector ends too soon


def order_bodies(*numbers: int) -> list[bytes]:
    return [f"order-{i}".encode() for i in numbers]
