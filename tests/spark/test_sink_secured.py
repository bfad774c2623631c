"""The ``rocketlite`` sink against a broker with TLS and access control: a user with Pub on
the target topic writes exactly once; a user without it is refused, and nothing is
visible."""

from __future__ import annotations

import json

import pytest

from rmq_spark.client import Admin, ClientConfig, ConsumerConfig, PullConsumer
from tests.support.tls_ca import make_pki

ADMIN = {"access_key": "admin", "secret_key": "admin-secret"}


def _acl(path, topic: str) -> str:
    user = {"subject": "User:writer", "policies": [{"entries": [
        {"resource": f"Topic:{topic}", "actions": ["Pub"], "decision": "Allow"},
    ]}]}  # fmt: skip
    path.write_text(
        json.dumps(
            {
                "users": [
                    {"username": "admin", "password": "admin-secret", "userType": "Super"},
                    {"username": "writer", "password": "writer-secret"},
                    {"username": "reader", "password": "reader-secret"},
                ],
                "acls": [user],
            }
        )
    )
    return str(path)


def _visible(endpoint: str, topic: str, tls: dict) -> list[bytes]:
    config = ClientConfig(**tls, **ADMIN)
    with Admin(endpoint, config) as admin:
        queues = admin.describe_topic(topic).readable
    found = []
    with PullConsumer(endpoint, config=ConsumerConfig(**tls, **ADMIN)) as puller:
        puller.assign(list(queues))
        for mq in queues:
            puller.seek(mq, 0)
            while (result := puller.pull(mq, max_messages=256)).message_count:
                found += result.batch.column("body").to_pylist()
    return sorted(found)


def test_write_through_tls_with_access_control(spark, broker_factory, topic, tmp_path):
    pki = make_pki(tmp_path / "pki")
    broker = broker_factory(
        "broker-secured",
        "--tls-cert", str(pki.server), "--tls-key", str(pki.server_key),
        "--acl", _acl(tmp_path / "acl.json", topic),
    )  # fmt: skip
    tls = {"tls": True, "tls_ca_file": str(pki.ca)}
    with Admin(broker.endpoint, ClientConfig(**tls, **ADMIN)) as admin:
        admin.create_topic(topic, queues=2)
    df = spark.createDataFrame([(f"s{i}",) for i in range(60)], "body string")

    def write(user: str, secret: str) -> None:
        (
            df.write.format("rocketlite")
            .option("endpoints", broker.endpoint)
            .option("topic", topic)
            .option("tls", "true")
            .option("tlsCaFile", str(pki.ca))
            .option("accessKey", user)
            .option("secretKey", secret)
            .mode("append")
            .save()
        )

    with pytest.raises(Exception, match="access control"):
        write("reader", "reader-secret")
    assert _visible(broker.endpoint, topic, tls) == []
    write("writer", "writer-secret")
    assert _visible(broker.endpoint, topic, tls) == sorted(f"s{i}".encode() for i in range(60))


def test_another_user_cannot_end_or_stage_into_a_users_sink(broker_factory, topic, tmp_path):
    import pyarrow as pa

    from rmq_spark.sink.commit import abort_batch, end_batch
    from rmq_spark.sink.options import SinkOptions
    from rmq_spark.sink.rows import plan_columns
    from rmq_spark.sink.send import TaskWriter

    broker = broker_factory("broker-acl", "--acl", _acl(tmp_path / "acl.json", topic))
    with Admin(broker.endpoint, ClientConfig(**ADMIN)) as admin:
        admin.create_topic(topic, queues=1)

    def options(user: str) -> SinkOptions:
        return SinkOptions.parse(
            {"endpoints": broker.endpoint, "topic": topic, "accessKey": user,
             "secretKey": f"{user}-secret"}
        )  # fmt: skip

    writer = TaskWriter(options("writer"), plan_columns([("body", "string")], topic), "etl",
                        "etl.t0", 0)  # fmt: skip
    try:
        writer.write(pa.RecordBatch.from_pydict({"body": ["a", "b"]}))
        commit = writer.finish()
    finally:
        writer.close()
    with pytest.raises(Exception, match="access control: user reader may not act as"):
        abort_batch(options("reader"), "etl", 0)
    assert end_batch(options("writer"), "etl", 0, [commit]).committed_messages == 2
    assert _visible(broker.endpoint, topic, {}) == [b"a", b"b"]
