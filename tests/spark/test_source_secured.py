"""The Spark source against a broker with TLS and access control both on: a batch read and
an AvailableNow stream that commits its group's offsets, as a user with only Sub on the
topic and its group; the secret comes from a file and never shows in the plan."""

from __future__ import annotations

import json

from rmq_spark.client import Admin, ClientConfig, Producer, ProducerConfig
from rmq_spark.structs import MessageQueue
from tests.support.spark_helpers import batch, rows_of, run_available_now, stream
from tests.support.tls_ca import make_pki

SECRET = "etl-secret-never-printed"


def acl_file(path, topic: str) -> str:
    path.write_text(
        json.dumps(
            {
                "users": [
                    {"username": "admin", "password": "admin-secret", "userType": "Super"},
                    {"username": "etl", "password": SECRET},
                ],
                "acls": [
                    {
                        "subject": "User:etl",
                        "policies": [
                            {
                                "entries": [
                                    {
                                        "resource": [f"Topic:{topic}", "Group:etl-secured"],
                                        "actions": ["Sub"],
                                        "decision": "Allow",
                                    },
                                    # the source lists topics to see new ones and new queues
                                    {"resource": "Topic:*", "actions": ["List"]},
                                ]
                            }
                        ],
                    }
                ],
            }
        )
    )
    return str(path)


def test_batch_and_stream_through_tls_with_access_control(spark, broker_factory, topic, tmp_path):
    pki = make_pki(tmp_path / "pki")
    broker = broker_factory(
        "broker-secured",
        "--tls-cert", str(pki.server), "--tls-key", str(pki.server_key),
        "--acl", acl_file(tmp_path / "acl.json", topic),
    )  # fmt: skip
    admin_config = {
        "tls": True, "tls_ca_file": str(pki.ca), "access_key": "admin",
        "secret_key": "admin-secret",
    }  # fmt: skip
    with Admin(broker.endpoint, ClientConfig(**admin_config)) as admin:
        admin.create_topic(topic, queues=2)
    sent = {}
    with Producer(broker.endpoint, config=ProducerConfig(**admin_config)) as producer:
        for queue in (0, 1):
            bodies = [f"q{queue}-{i}".encode() for i in range(20)]
            for result, body in zip(
                producer.send_batch(topic, bodies, queue=queue), bodies, strict=True
            ):
                sent[("broker-secured", queue, result.queue_offset)] = body
    secret_file = tmp_path / "etl.secret"
    secret_file.write_text(SECRET + "\n")
    secured = {
        "tls": "true",
        "tlsCaFile": str(pki.ca),
        "accessKey": "etl",
        "secretKeyFile": str(secret_file),
    }

    df = batch(spark, broker.endpoint, topic, **secured)
    assert rows_of(df) == sent
    assert SECRET not in df._jdf.queryExecution().toString()

    live = stream(
        spark, broker.endpoint, topic, group="etl-secured", startingOffsets="earliest", **secured
    )
    collected = run_available_now(live, tmp_path / "checkpoint")
    assert collected.messages == sent
    with Admin(broker.endpoint, ClientConfig(**admin_config)) as admin:
        committed = admin.consumer_offsets("etl-secured", topic)
    assert committed == {MessageQueue(topic, "broker-secured", q): 20 for q in (0, 1)}

    # a group the user was not granted: the query still reads (its checkpoint is the source
    # of truth) but the broker refuses to store that group's offsets
    other = stream(
        spark, broker.endpoint, topic, group="not-granted", startingOffsets="earliest", **secured
    )
    assert run_available_now(other, tmp_path / "checkpoint-other").messages == sent
    with Admin(broker.endpoint, ClientConfig(**admin_config)) as admin:
        assert admin.consumer_offsets("not-granted", topic) == {}
