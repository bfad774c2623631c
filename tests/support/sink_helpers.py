"""Helpers of the Spark sink tests: reading a topic back as a default consumer sees it."""

from __future__ import annotations

from rmq_spark.client import Admin
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import read_queue


def read_all(endpoint: str, topic: str) -> dict[MessageQueue, list[dict]]:
    """Every visible message of ``topic`` by queue, in queue order: dicts with the source's
    columns, ``keys`` as a list and ``properties`` as a dict."""
    with Admin(endpoint) as admin:
        queues = admin.describe_topic(topic).readable
    found: dict[MessageQueue, list[dict]] = {}
    for mq in queues:
        rows = read_queue(endpoint, topic, mq.queue_id, mq.broker_name)
        for row in rows:
            row["keys"] = (row["keys"] or "").split()
            row["properties"] = dict(row["properties"] or [])
        found[mq] = rows
    return found


def bodies(endpoints: str, topic: str) -> list[bytes]:
    """Every visible body of ``topic``, sorted."""
    return sorted(row["body"] for rows in read_all(endpoints, topic).values() for row in rows)
