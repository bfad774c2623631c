"""An acknowledged offset commit survives a SIGKILL of the broker: after the restart,
``rocketlite offsets`` shows exactly the last acknowledged commits, even for a broker killed
in its first second (before any periodic persist could have run)."""

from __future__ import annotations

import json
import threading

import pytest

from rmq_spark.cli import main as cli_main
from rmq_spark.client import Admin
from rmq_spark.structs import MessageQueue

QUEUES = 8


def offsets_shown(capsys, endpoint: str, group: str, topic: str) -> dict[int, int]:
    capsys.readouterr()
    assert cli_main(["offsets", group, "--topic", topic, "--endpoints", endpoint, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return {r["queueId"]: r["committed"] for r in rows if r["committed"] is not None}


@pytest.mark.parametrize("flush", ["ASYNC", "SYNC"])
def test_acknowledged_commits_survive_a_kill(broker_factory, capsys, flush):
    broker = broker_factory("broker-a", "--flush", flush)
    with Admin(broker.endpoint) as admin:
        admin.create_topic("T", queues=QUEUES)
    # Four threads commit rising offsets; what each last got acknowledged is the truth.
    acknowledged: dict[int, int] = {}
    lock = threading.Lock()

    def commit_rising(queue_ids: list[int]) -> None:
        with Admin(broker.endpoint) as admin:
            for step in range(1, 40):
                offsets = {MessageQueue("T", "broker-a", q): step * 10 + q for q in queue_ids}
                admin.commit_offsets("G", offsets)
                with lock:
                    acknowledged.update({q: step * 10 + q for q in queue_ids})

    threads = [threading.Thread(target=commit_rising, args=([q, q + 4],)) for q in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    broker.kill()  # right after the last acknowledgement: no persist in between
    broker.start()
    assert offsets_shown(capsys, broker.endpoint, "G", "T") == acknowledged


def test_a_broker_killed_in_its_first_second_keeps_the_group(broker_factory, capsys):
    broker = broker_factory("broker-a")
    with Admin(broker.endpoint) as admin:
        admin.create_topic("T", queues=2)
    broker.kill()
    broker.start()
    with Admin(broker.endpoint) as admin:  # commit and kill within the first second
        admin.commit_offsets("G", {MessageQueue("T", "broker-a", 0): 5})
    broker.kill()
    broker.start()
    assert offsets_shown(capsys, broker.endpoint, "G", "T") == {0: 5}
