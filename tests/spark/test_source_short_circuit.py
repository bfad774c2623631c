"""Short-circuit reads from Spark: tasks on the broker's host read the broker's files (the
broker passes them after its access checks) instead of pulling. The broker's counters say
which path served a read; the rows are the same either way, and a broker without the
socket is pulled from."""

from __future__ import annotations

from rmq_spark.client import Admin
from tests.support.spark_helpers import (
    batch,
    create_topic,
    produce,
    rows_of,
    run_available_now,
    stream,
)


def served(endpoint: str) -> tuple[int, int]:
    """(pulls answered, queue ranges handed to short-circuit readers) by the broker."""
    with Admin(endpoint) as admin:
        stats = next(iter(admin.broker_info().values())).server_stats
    return stats["pull_calls"], stats["short_circuit_reads"]


def test_a_batch_read_on_the_brokers_host_reads_its_files(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=3)
    sent = produce(broker.endpoint, topic, {0: 500, 1: 20, 2: 0}, tags=["a", "b"])
    pulls, local = served(broker.endpoint)
    assert rows_of(batch(spark, broker.endpoint, topic)) == sent
    after = served(broker.endpoint)
    assert after[0] == pulls, "no pull: every range came from the files"
    assert after[1] >= local + 2  # the two queues with messages

    only_a = batch(spark, broker.endpoint, topic, subExpression="a")
    assert rows_of(only_a) == {k: v for k, v in sent.items() if k[2] % 2 == 0}

    pulls, local = served(broker.endpoint)
    assert rows_of(batch(spark, broker.endpoint, topic, shortCircuit="false")) == sent
    after = served(broker.endpoint)
    assert after[0] > pulls and after[1] == local, "shortCircuit=false pulls"


def test_a_streaming_query_reads_the_files_too(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, 300)
    pulls, local = served(broker.endpoint)
    df = stream(spark, broker.endpoint, topic, startingOffsets="earliest")
    collected = run_available_now(df, tmp_path / "checkpoint")
    assert collected.messages == sent
    after = served(broker.endpoint)
    assert after[0] == pulls and after[1] > local


def test_without_the_socket_tasks_pull(spark, broker_factory, topic):
    off = broker_factory("broker-off", "--short-circuit-socket", "off")
    create_topic(off.endpoint, topic, queues=2)
    sent = produce(off.endpoint, topic, 50)
    assert rows_of(batch(spark, off.endpoint, topic)) == sent
    pulls, local = served(off.endpoint)
    assert pulls > 0 and local == 0
