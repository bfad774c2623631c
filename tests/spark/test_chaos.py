"""Chaos: producers, a push consumer group and a Spark query run while the broker is hurt.

The broker is SIGKILLed ``ROCKETLITE_CHAOS_KILLS`` times (3 by default; set it higher for a
long run, e.g. ``ROCKETLITE_CHAOS_KILLS=50 ./dev test tests/spark/test_chaos.py``), each
time at a random moment and restarted on the same port after a random pause. At the end:

* nothing acknowledged is lost: every acknowledged message is where its answer said, and
  the Spark query holds it exactly once; every other row is a message whose send answer
  was lost (the producer could not tell whether it was stored);
* the push consumer group got every acknowledged message at least once;
* no committed offset of either group ever went back, as seen by a client polling them;
* the store verifier finds nothing wrong.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from broker_harness import free_port
from chaos_harness import OffsetWatch, ProducerLoad, PushLoad
from spark_helpers import create_topic, start_collecting, stream, wait_for

from rmq_spark.store.verify import verify_store

KILLS = int(os.environ.get("ROCKETLITE_CHAOS_KILLS", "3"))
SEED = int(os.environ.get("ROCKETLITE_CHAOS_SEED", "7"))
QUEUES = 4


@pytest.mark.slow
def test_chaos_kills(spark, broker_factory, topic, tmp_path):
    rng = random.Random(SEED)
    broker = broker_factory("broker-c", "--port", str(free_port()))
    endpoint = broker.endpoint
    create_topic(endpoint, topic, queues=QUEUES)
    producers = [ProducerLoad(endpoint, topic, f"p{i}") for i in range(2)]
    push = PushLoad(endpoint, topic, "chaos-push")
    watch = OffsetWatch(endpoint, topic, ["chaos-push", "chaos-spark"])
    df = stream(
        spark, endpoint, topic, startingOffsets="earliest", group="chaos-spark",
        maxMessagesPerTrigger="2000",
    )  # fmt: skip
    query, collected = start_collecting(df, tmp_path / "checkpoint", interval="1 second")
    for load in (*producers, watch):
        load.start()
    push.start()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.0, 3.0))
            watch.look()
            broker.kill()
            time.sleep(rng.uniform(0.5, 3.0))
            broker.start()
            assert broker.endpoint == endpoint
            watch.look()  # before the consumers commit again
        time.sleep(2.0)  # some traffic after the last restart
    finally:
        for producer in producers:
            producer.stop()
    acked = {body: where for p in producers for body, where in p.acked.items()}
    unknown = set().union(*(p.unknown for p in producers))
    assert len(acked) > 100, f"too little got through: {[p.errors for p in producers]}"
    try:
        wait_for(
            lambda: acked.keys() <= {bytes(r.body) for r in collected.rows},
            120,
            "every acked message in the Spark query",
            query,
        )
        wait_for(lambda: acked.keys() <= push.seen.keys(), 120, "the push group's deliveries")
        time.sleep(1.0)  # let the last commits land before the final look
    finally:
        query.stop()
        push.stop()
        watch.stop()

    # ``messages`` fails on a (queue, offset) the query saw twice
    rows = {(queue_id, offset): body for (_, queue_id, offset), body in collected.messages.items()}
    for body, (queue_id, offset) in acked.items():
        assert rows.get((queue_id, offset)) == body, f"acked {body!r} not at {queue_id}/{offset}"
    strangers = {body for body in rows.values() if body not in acked and body not in unknown}
    assert not strangers, f"rows nobody sent: {sorted(strangers)[:5]}"
    assert watch.observations > 0 and not watch.went_back, watch.went_back[:5]
    broker.stop()
    report = verify_store(broker.store_dir)
    assert report.ok, report.problems[:5]
