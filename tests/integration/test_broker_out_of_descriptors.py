"""A broker process that runs out of file descriptors while it serves: connections take
every descriptor its limit allows, then creating a topic is refused with an error saying
so (nothing of it written), while the broker keeps serving and its background work (flush,
checkpoint, message index) waits; once descriptors are free the same request succeeds, and
after a restart every acknowledged message is there, found by its key too."""

from __future__ import annotations

import os
import socket
import time

import pytest

from rmq_spark.client import Admin, Producer, PullConsumer
from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess, read_queue
from tests.support.eventually import eventually

#: the broker's RLIMIT_NOFILE, soft and hard (it cannot raise it): about 30 are its own
FILE_LIMIT = 256
#: connections beyond the limit wait in the listen backlog: each descriptor the broker
#: frees is taken by the next accept, so it stays out of descriptors while they wait
BACKLOG_EXTRA = 64


def held(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def bodies(broker: BrokerProcess, topic: str, queue_id: int) -> list[bytes]:
    return [r["body"] for r in read_queue(broker.endpoint, topic, queue_id, broker.name)]


def pulled(puller: PullConsumer, mq: MessageQueue) -> list[bytes]:
    puller.seek(mq, 0)
    return puller.pull(mq, max_messages=10).batch.column("body").to_pylist()


@pytest.mark.timeout(120)
def test_out_of_descriptors_a_new_topic_is_refused_and_the_broker_serves_on(tmp_path):
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0"]
    broker = BrokerProcess(
        "broker-fd", tmp_path / "store", tmp_path / "broker.log", flags, file_limit=FILE_LIMIT
    )
    broker.start()
    hog: list[socket.socket] = []
    try:
        assert broker.process is not None
        pid = broker.process.pid
        host, port = broker.remoting_address.rsplit(":", 1)
        with (
            Admin(broker.endpoint) as admin,
            Producer(broker.endpoint) as producer,
            PullConsumer(broker.endpoint) as puller,
        ):
            admin.create_topic("Before", queues=2)
            producer.send_batch("Before", [(b"acked before", "x", "k-before")], queue=0)
            before = MessageQueue("Before", broker.name, 0)
            puller.assign([before])
            assert pulled(puller, before) == [b"acked before"]  # its connection is made

            # Take every descriptor the broker may hold with connections to its remoting
            # port (the admin and producer connections stay open: nothing new is needed
            # to reach the broker).
            while len(hog) < FILE_LIMIT + BACKLOG_EXTRA:
                hog.append(socket.create_connection((host, int(port)), timeout=5))
            eventually(lambda: held(pid) >= FILE_LIMIT - 1, what="the broker out of descriptors")
            with pytest.raises(ResourceExhaustedError, match="no file descriptor left"):
                admin.create_topic("Refused", queues=2)
            assert broker.running
            assert "Refused" not in admin.list_topics()  # nothing of it was made
            # A queue served before is read on (over the connection made before): the files
            # it reads stay open, or take the descriptor of another of the store's files.
            assert pulled(puller, before) == [b"acked before"]
            time.sleep(1.5)  # the background rounds (every 0.2-1 s) meet the exhaustion too
            assert broker.running
            # and wait, closing none of the files the reads use (the message index's first
            # round may come only now, when the machine is loaded)
            assert pulled(puller, before) == [b"acked before"]

            for sock in hog:
                sock.close()
            hog.clear()
            eventually(lambda: held(pid) < FILE_LIMIT // 2, what="descriptors given back")
            admin.create_topic("Refused", queues=2)
            producer.send_batch("Refused", [(b"acked after", "x", "k-after")], queue=1)
        assert broker.running

        broker.restart()  # a clean stop and start: everything acknowledged is there
        assert bodies(broker, "Before", 0) == [b"acked before"]
        assert bodies(broker, "Refused", 1) == [b"acked after"]
        with Admin(broker.endpoint) as admin:
            for topic, key, body in (("Before", "k-before", b"acked before"),
                                     ("Refused", "k-after", b"acked after")):  # fmt: skip
                found = eventually(
                    lambda t=topic, k=key: admin.query_messages(t, k), what=f"key {key}"
                )
                assert [b for batch, _ in found for b in batch.column("body").to_pylist()] == [body]
        log = broker.log_text()
        # the accept loop retries every 0.1 s; its failure is said once a minute
        assert log.count("remoting accept failed") <= 2, broker.log_tail()
        assert "Traceback" not in log, broker.log_tail()
    finally:
        for sock in hog:
            sock.close()
        broker.clean_up()
