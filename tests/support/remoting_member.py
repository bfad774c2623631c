"""A consumer-group member over RocketMQ's remoting protocol, as an orderly Java consumer is:
one connection, HEART_BEAT with its group, LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for its queues,
and the broker's NOTIFY_CONSUMER_IDS_CHANGED requests collected as they come.

Tests use :class:`RemotingMember` in-process. As a script it is a member in a process of its
own that a test can SIGKILL::

    python -m tests.support.remoting_member --address HOST:PORT --group G --topic T --client-id C \\
        --queues 0,1,2,3 --broker-name broker-a

It joins, locks the queues and prints ``locked <queue ids>`` (those it got), then holds them
(its connection open, no renewals) until it is killed.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rmq_spark.client.remoting.transport import RemotingConnection, raise_for
from rmq_spark.wire.remoting.codes import RequestCode
from rmq_spark.wire.remoting.frame import Command

CALL_TIMEOUT_S = 5.0


class RemotingMember:
    """One member's connection to a broker's remoting port."""

    def __init__(self, address: str, group: str, client_id: str, broker_name: str) -> None:
        self.group = group
        self.client_id = client_id
        self.broker_name = broker_name
        #: monotonic times of the NOTIFY_CONSUMER_IDS_CHANGED requests received
        self.notified: list[float] = []
        #: the broker's other requests received, in order
        self.requests: list[Command] = []
        self._seen = threading.Condition()
        self._connection = RemotingConnection(address, on_request=self._on_request)

    def _on_request(self, command: Command) -> None:
        with self._seen:
            if command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                self.notified.append(time.monotonic())
            else:
                self.requests.append(command)
            self._seen.notify_all()

    def wait_request(self, code: int, timeout_s: float) -> Command | None:
        """The first request of the broker's with ``code`` received, or None."""
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while True:
                found = [c for c in self.requests if c.code == code]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._seen.wait(left)

    def wait_notified(self, after: float, timeout_s: float) -> float | None:
        """The time of the first notification received after ``after``, or None."""
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while True:
                later = [t for t in self.notified if t > after]
                if later:
                    return later[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._seen.wait(left)

    def _call(self, code: int, body: dict | None = None, **ext: str) -> Command:
        payload = json.dumps(body).encode() if body is not None else b""
        answer = self._connection.call(Command(code, ext, payload), CALL_TIMEOUT_S)
        raise_for(answer, f"request {code}")
        return answer

    def heartbeat(self, topic: str) -> None:
        consumer = {
            "groupName": self.group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
        }
        self._call(
            RequestCode.HEART_BEAT,
            {"clientID": self.client_id, "consumerDataSet": [consumer], "producerDataSet": []},
        )

    def _lock_body(self, topic: str, queue_ids: list[int]) -> dict:
        return {
            "consumerGroup": self.group,
            "clientId": self.client_id,
            "mqSet": [
                {"topic": topic, "brokerName": self.broker_name, "queueId": q} for q in queue_ids
            ],
        }

    def lock(self, topic: str, queue_ids: list[int]) -> list[int]:
        """Lock the queues; the ids of those this member holds now, sorted."""
        answer = self._call(RequestCode.LOCK_BATCH_MQ, self._lock_body(topic, queue_ids))
        return sorted(mq["queueId"] for mq in json.loads(bytes(answer.body))["lockOKMQSet"])

    def unlock(self, topic: str, queue_ids: list[int]) -> None:
        self._call(RequestCode.UNLOCK_BATCH_MQ, self._lock_body(topic, queue_ids))

    def unregister(self) -> None:
        self._call(RequestCode.UNREGISTER_CLIENT, clientID=self.client_id, consumerGroup=self.group)

    def members(self) -> list[str]:
        answer = self._call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=self.group)
        return json.loads(bytes(answer.body))["consumerIdList"]

    def close(self) -> None:
        self._connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--queues", required=True, help="queue ids to lock, e.g. 0,1,2")
    parser.add_argument("--broker-name", default="broker-a")
    args = parser.parse_args(argv)
    member = RemotingMember(args.address, args.group, args.client_id, args.broker_name)
    member.heartbeat(args.topic)
    locked = member.lock(args.topic, [int(q) for q in args.queues.split(",")])
    sys.stdout.write(f"locked {' '.join(map(str, locked))}\n")
    sys.stdout.flush()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main())
