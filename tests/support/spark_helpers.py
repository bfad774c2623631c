"""Helpers of the Spark source tests: topics, producing, running streams, reading sinks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq_spark.client import Admin, Producer
from tests.support import scripts

#: (brokerName, queueId, queueOffset) -> body: what a test sent, or what a sink holds
Messages = dict[tuple[str, int, int], bytes]


def create_topic(endpoints: str, topic: str, queues: int = 4) -> None:
    with Admin(endpoints) as admin:
        admin.create_topic(topic, queues=queues)


def group_offsets(endpoints: str, group: str, topic: str):
    """The group's committed offsets on the brokers (queues never committed are absent)."""
    with Admin(endpoints) as admin:
        return admin.consumer_offsets(group, topic)


def produce(
    endpoints: str,
    topic: str,
    per_queue: dict[int, int] | int,
    *,
    tags: str | list[str | None] | None = None,
    prefix: str = "m",
    broker: str | None = None,
) -> Messages:
    """Send ``per_queue`` messages (a count per queue id, or one count for every writable
    queue) to ``topic``; returns what was stored where. ``tags`` cycle over the messages of
    each queue; ``broker`` limits a dict of counts to that broker's queues."""
    sent: Messages = {}
    tag_list = tags if isinstance(tags, list) else [tags]
    with Producer(endpoints) as producer:
        queues = producer.writable_queues(topic)
        if isinstance(per_queue, int):
            counts = {mq: per_queue for mq in queues}
        else:
            counts = {
                mq: per_queue.get(mq.queue_id, 0)
                for mq in queues
                if broker is None or mq.broker_name == broker
            }
        for mq, count in counts.items():
            if count == 0:
                continue
            messages = [
                (
                    f"{prefix}-{mq.broker_name}-{mq.queue_id}-{i}".encode(),
                    tag_list[i % len(tag_list)],
                )
                for i in range(count)
            ]
            results = producer.send_batch(topic, messages, queue=mq)
            for result, (body, _) in zip(results, messages, strict=True):
                sent[(mq.broker_name, mq.queue_id, result.queue_offset)] = body
    return sent


def rows_of(df) -> Messages:
    """What a DataFrame of source rows holds; a message held twice fails."""
    rows = df.select("brokerName", "queueId", "queueOffset", "body").collect()
    return _unique(rows)


def _unique(rows) -> Messages:
    found = {(r.brokerName, r.queueId, r.queueOffset): bytes(r.body) for r in rows}
    assert len(found) == len(rows), f"{len(rows) - len(found)} messages were read twice"
    return found


def stream(spark, endpoints: str, topic: str | None = None, **options: str):
    """``spark.readStream.format("rocketlite")`` with endpoints, topic and options."""
    reader = spark.readStream.format("rocketlite").option("endpoints", endpoints)
    if topic is not None:
        reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def batch(spark, endpoints: str, topic: str | None = None, **options: str):
    """``spark.read.format("rocketlite")`` with endpoints, topic and options."""
    reader = spark.read.format("rocketlite").option("endpoints", endpoints)
    if topic is not None:
        reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class Collected:
    """Rows a foreachBatch sink saw, batch by batch (and when: ``times``, monotonic s).

    ``on_batch(batch_index)`` runs after each non-empty batch is collected.
    """

    def __init__(self, on_batch: Callable[[int], None] | None = None) -> None:
        self.batches: list[list] = []
        self.times: list[float] = []
        self.on_batch = on_batch

    def __call__(self, df, _batch_id: int) -> None:
        columns = ["brokerName", "queueId", "queueOffset", "body", "tags", "topic"]
        rows = df.select(*columns).collect()
        self.batches.append(rows)
        self.times.append(time.monotonic())
        if rows and self.on_batch is not None:
            self.on_batch(len(self.sizes) - 1)

    @property
    def sizes(self) -> list[int]:
        return [len(rows) for rows in self.batches if rows]

    @property
    def messages(self) -> Messages:
        return _unique([row for rows in self.batches for row in rows])

    @property
    def rows(self) -> list:
        return [row for rows in self.batches for row in rows]


def run_available_now(
    df,
    checkpoint: Path,
    output: Path | None = None,
    *,
    collected: Collected | None = None,
    once: bool = False,
) -> Collected | list[int]:
    """Run ``df`` with Trigger.AvailableNow (or Trigger.Once) until it finishes.

    Without ``output``: a foreachBatch sink (``collected``, or a new one); returns it. With
    ``output``: a parquet sink there; returns the input row count of each non-empty batch of
    this run.
    """
    collected = collected or Collected()
    trigger = {"once": True} if once else {"availableNow": True}
    writer = df.writeStream.option("checkpointLocation", str(checkpoint)).trigger(**trigger)
    if output is None:
        writer = writer.foreachBatch(collected)
    else:
        writer = writer.format("parquet").option("path", str(output))
    query = writer.start()
    try:
        finished = query.awaitTermination(120)
        assert finished, "the AvailableNow query did not finish within 120 s"
        if query.exception() is not None:
            raise query.exception()
    finally:
        if query.isActive:
            query.stop()
    if output is None:
        return collected
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def drain(writer, timeout_s: float = 300) -> None:
    """Start ``writer`` (a DataStreamWriter) with Trigger.AvailableNow and wait until the
    query ends; raises the query's error."""
    query = writer.trigger(availableNow=True).start()
    try:
        finished = query.awaitTermination(timeout_s)
        assert finished, f"the AvailableNow query did not finish within {timeout_s:g} s"
        if query.exception() is not None:
            raise query.exception()
    finally:
        if query.isActive:
            query.stop()


def start_collecting(
    df, checkpoint: Path, interval: str = "300 milliseconds", collected: Collected | None = None
):
    """A running query with a foreachBatch sink; returns ``(query, collected)``."""
    collected = collected or Collected()
    query = (
        df.writeStream.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=interval)
        .foreachBatch(collected)
        .start()
    )
    return query, collected


def unless_stopped(query, check: Callable[[], object]) -> Callable[[], object]:
    """``check`` for :func:`tests.support.eventually.eventually` that ends the wait at once,
    with the query's error, when ``check`` is not met and the streaming ``query`` has
    stopped."""
    return _unless(
        lambda: None if query.isActive else f"the query stopped: {query.exception()}", check
    )


def unless_exited(process, log: Path, check: Callable[[], object]) -> Callable[[], object]:
    """``check`` for :func:`tests.support.eventually.eventually` that ends the wait at once,
    with the tail of ``log``, when ``check`` is not met and ``process`` (a Popen) has exited.
    A wait that times out reports the tail of ``log`` too."""

    def why() -> str | None:
        if process.poll() is None:
            return None
        return f"the process exited ({process.returncode}):\n{log_tail(log)}"

    def met() -> object:
        value = check()
        if not value:
            raise NotYet(log)
        return value

    return _unless(why, met)


class NotYet(AssertionError):
    """A check not met yet; its message, the tail of ``log``, is read only when shown (a
    wait shows the last one when it times out)."""

    def __init__(self, log: Path) -> None:
        super().__init__()
        self.log = log

    def __str__(self) -> str:
        return f"not yet; the tail of {self.log}:\n{log_tail(self.log)}"


def _unless(why_hopeless: Callable[[], str | None], check: Callable[[], object]):
    """``check``, failing the test at once when it is not met and ``why_hopeless()`` names
    a reason that waiting longer cannot help."""

    def checked() -> object:
        try:
            value = check()
        except AssertionError:
            if (why := why_hopeless()) is not None:
                pytest.fail(why)
            raise
        if not value and (why := why_hopeless()) is not None:
            pytest.fail(why)
        return value

    return checked


def start_job(module: str, args: list[str], log: Path):
    """``python -m tests.support.<module> args...`` (a Spark job) in its own process group
    (so SIGKILLing the group kills its JVM and Python workers too), appending its output to
    ``log``. The job, its JVM and their Python workers find the package and the data source
    through the environment (:func:`tests.support.scripts.env`)."""
    import subprocess
    import sys

    with open(log, "ab") as out:
        return subprocess.Popen(
            scripts.command(module, *args),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=scripts.env(PYSPARK_PYTHON=sys.executable),
        )


def log_tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


#: the session setting that lets Spark push filters into a Python source
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@contextlib.contextmanager
def pushdown(spark, enabled: bool = True):
    """Filter pushdown turned on (or off) in the session for the ``with`` block."""
    spark.conf.set(PUSHDOWN, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.unset(PUSHDOWN)


def messages_pulled(endpoint: str) -> int:
    """Messages the broker at ``endpoint`` has answered pulls with since it started."""
    with Admin(endpoint) as admin:
        (info,) = admin.broker_info().values()
    return info.server_stats["messages_pulled"]
