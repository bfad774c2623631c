"""Helpers of the Spark sink tests: reading a topic back as a default consumer sees it."""

from __future__ import annotations

from rmq_spark.client import Admin, PullConsumer
from rmq_spark.structs import MessageQueue


def read_all(endpoints: str, topic: str) -> dict[MessageQueue, list[dict]]:
    """Every visible message of ``topic`` by queue, in queue order: dicts with the source's
    columns, ``keys`` as a list and ``properties`` as a dict."""
    with Admin(endpoints) as admin:
        queues = admin.describe_topic(topic).readable
    found: dict[MessageQueue, list[dict]] = {}
    with PullConsumer(endpoints) as puller:
        puller.assign(list(queues))
        for mq in queues:
            puller.seek(mq, 0)
            rows: list[dict] = []
            while True:
                result = puller.pull(mq, max_messages=1024)
                if result.message_count == 0:
                    break
                rows += result.batch.to_pylist()
            for row in rows:
                row["keys"] = (row["keys"] or "").split()
                row["properties"] = dict(row["properties"] or [])
            found[mq] = rows
    return found


def bodies(endpoints: str, topic: str) -> list[bytes]:
    """Every visible body of ``topic``, sorted."""
    return sorted(row["body"] for rows in read_all(endpoints, topic).values() for row in rows)
