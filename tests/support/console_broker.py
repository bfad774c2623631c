"""A broker process serving the web console (``--http-port``), with data to show: the
console's API tests, its browser test and the README's screenshot use it.

``seed`` makes two topics (``orders``, 4 queues, and ``audit``, 2), sends keyed text
messages and one binary message, and commits offsets for group ``billing`` on ``orders``
(part of it read, so it lags) and ``auditors`` on ``audit``. With ACL, ``alice`` may use
``orders`` and ``billing`` only, ``root`` is a super user.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark.client import Admin, ClientConfig, Producer, PullConsumer
from rmq_spark.client.consumer import ConsumerConfig
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually

SECRETS = {"root": "root-secret", "alice": "alice-secret", "bob": "bob-secret"}
ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        {"username": "alice", "password": SECRETS["alice"]},
        {"username": "bob", "password": SECRETS["bob"]},
    ],
    "acls": [
        {"subject": "User:alice", "policies": [{"entries": [
            {"resource": ["Topic:orders", "Group:billing"], "actions": ["All"]}]}]},
        {"subject": "User:bob", "policies": [{"entries": [
            {"resource": "Topic:other", "actions": ["All"]}]}]},
    ],
}  # fmt: skip
#: the binary body sent to ``orders`` (not UTF-8, and markup if it were shown as text)
BINARY_BODY = b"\x00\x01\xfe\xff<script>window.pwned=1</script>"
#: a text body holding markup, sent to ``orders`` with key ``markup``
MARKUP_BODY = '<img src=x onerror="window.pwned=1"> naïve'.encode()


def start_console_broker(root: Path, *, acl: bool, name: str = "console") -> BrokerProcess:
    """A started broker with the HTTP and remoting ports (and ``--acl`` with :data:`ACL`)."""
    flags = [*TEST_STORE_FLAGS, "--http-port", "0", "--remoting-port", "0"]
    if acl:
        path = root / "acl.json"
        path.write_text(json.dumps(ACL))
        flags += ["--acl", str(path)]
    broker = BrokerProcess(name, root / name, root / f"{name}.log", flags)
    return broker.start()


def http_base(broker: BrokerProcess) -> str:
    """``http://host:port`` of the broker's HTTP port, from its ready line."""
    part = broker.ready_line.split(" http=")
    assert len(part) == 2, f"no HTTP port in {broker.ready_line!r}"
    return "http://" + part[1].split()[0]


def keys(user: str | None) -> dict[str, str | None]:
    """A client config's access key and secret key for ``user`` (None: no ACL)."""
    if user is None:
        return {}
    return {"access_key": user, "secret_key": SECRETS[user]}


@dataclass
class Seeded:
    """What :func:`seed` stored."""

    #: offset message ids by key
    ids: dict[str, str] = field(default_factory=dict)
    #: (queue, queue offset) by key
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: messages per topic
    sent: dict[str, int] = field(default_factory=dict)
    #: billing's committed offsets of orders, and the queues' max offsets
    committed: dict[int, int] = field(default_factory=dict)
    max_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def lag(self) -> int:
        return sum(self.max_offsets[q] - self.committed[q] for q in self.committed)


def seed(broker: BrokerProcess, user: str | None = None, orders: int = 40) -> Seeded:
    """Topics, messages and two groups' offsets (see the module doc), as ``user``."""
    out = Seeded()
    with Admin(broker.endpoint, ClientConfig(**keys(user))) as admin:
        admin.create_topic("orders", queues=4)
        admin.create_topic("audit", queues=2)
    with Producer(broker.endpoint, config=ProducerConfig(**keys(user))) as producer:
        for i in range(orders):
            status = ("created", "paid")[i % 2]
            body = json.dumps({"order": i, "status": status}).encode()
            result = producer.send("orders", body, tags=status, keys=f"order-{i}")
            out.ids[f"order-{i}"] = result.offset_msg_id
            out.positions[f"order-{i}"] = (result.message_queue.queue_id, result.queue_offset)
        for key, body in (("binary", BINARY_BODY), ("markup", MARKUP_BODY)):
            result = producer.send("orders", body, tags="odd", keys=key)
            out.ids[key] = result.offset_msg_id
            out.positions[key] = (result.message_queue.queue_id, result.queue_offset)
        result = producer.send("audit", b"audit entry", keys="audit-1")
        out.ids["audit-1"] = result.offset_msg_id
    out.sent = {"orders": orders + 2, "audit": 1}
    config = ConsumerConfig(**keys(user))
    with PullConsumer(broker.endpoint, group="billing", config=config) as consumer:
        queues = [MessageQueue("orders", broker.name, q) for q in range(4)]
        consumer.assign(queues)
        for mq in queues:
            consumer.seek(mq, 0)
            result = consumer.pull(mq, max_messages=mq.queue_id + 1)  # a few: the rest lags
            out.committed[mq.queue_id] = result.next_begin_offset
            out.max_offsets[mq.queue_id] = result.max_offset
        consumer.commit()
    with PullConsumer(broker.endpoint, group="auditors", config=config) as consumer:
        mq = MessageQueue("audit", broker.name, 0)
        consumer.assign([mq])
        consumer.seek(mq, 0)
        consumer.pull(mq, max_messages=8)
        consumer.commit()
    # the message index is written behind the commit log: the last key sent, then all
    base = http_base(broker)
    eventually(
        lambda: api(base, "/api/message?topic=audit&key=audit-1", user)[2]["messages"],
        what="the keys in the message index",
    )
    return out


def api(
    base: str,
    path: str,
    user: str | None = None,
    *,
    body: object = None,
    headers: dict[str, str] | None = None,
    secret: str | None = None,
) -> tuple[int, dict[str, str], object]:
    """One request to the console's API: (status, lower-case headers, JSON or text).
    ``body`` (not None) makes it a POST of JSON with the console's header."""
    sent = {"X-Rocketlite-Console": "1"}
    if user is not None:
        token = f"{user}:{secret if secret is not None else SECRETS[user]}".encode()
        sent["Authorization"] = "Basic " + base64.b64encode(token).decode()
    data = None
    if body is not None:
        sent["Content-Type"] = "application/json"
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent.update(headers or {})
    request = urllib.request.Request(base + path, data=data, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw, got = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, raw, got = error.code, error.read(), error.headers
    lower = {k.lower(): v for k, v in got.items()}
    value: object = raw.decode("utf-8", "replace")
    if lower.get("content-type", "").startswith("application/json"):
        value = json.loads(raw)
    return status, lower, value


def screenshot_dir() -> Path | None:
    """Where the browser test also saves a screenshot (``CONSOLE_SCREENSHOT_DIR``), if set."""
    value = os.environ.get("CONSOLE_SCREENSHOT_DIR")
    return Path(value) if value else None
