"""RocketMQ's own protocol against rocketlite: what a Java, Go or Node application (or
``mqadmin``) does when it is given the broker's remoting port as its name server.

Starts a broker in-process with its remoting port on a free loopback port, then, as a
RocketMQ client would over that port: looks up a topic's route, sends order events in a
batch, pulls them back with a tag filter, and commits a consumer group's offset, which the
broker's other protocols (and ``rocketlite offsets``) see. Run it as it is:

    python examples/remoting_clients.py

Then point a real RocketMQ client at the address it prints (``namesrvAddr``), or read the
same topic with Spark: ``.option("nameServer", address)`` in place of ``endpoints``.
"""

from __future__ import annotations

import tempfile

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.structs import MessageQueue


def main() -> None:
    with tempfile.TemporaryDirectory() as store:
        server, _ = create_server(BrokerConfig(store, port=0, remoting_port=0))
        with server:
            name_server = server.remoting_address
            print(f"broker {server.broker.name}: gRPC {server.endpoint}, remoting {name_server}")
            print(f"  a RocketMQ application uses namesrvAddr={name_server}")
            with Admin(server.endpoint) as admin:
                admin.create_topic("orders", queues=2)
            with RemotingClient(name_server) as client:
                run(client)
            with Admin(server.endpoint) as admin:  # the same group, seen over gRPC
                committed = admin.consumer_offsets("billing", "orders")
            for mq, offset in sorted(committed.items()):
                print(f"gRPC sees group billing at {offset} on queue {mq.queue_id}")


def run(client: RemotingClient) -> None:
    route = client.route("orders")
    print(f"route of orders: {len(route.readable)} queues on {route.addresses}")
    mq = route.writable[0]
    events = [(f"order-{i}", "Paid" if i % 3 else "Refunded") for i in range(9)]
    sent = client.send(
        mq,
        [f'{{"order": "{key}"}}'.encode() for key, _ in events],
        [{"TAGS": tag, "KEYS": key} for key, tag in events],
    )
    print(f"sent {len(events)} events to queue {mq.queue_id} from offset {sent.queue_offset}")
    refunds = client.pull(mq, sent.queue_offset, max_messages=32, expression="Refunded")
    for row in decode_records(refunds.data).to_pylist():
        print(f"  refund at offset {row['queueOffset']}: {row['keys']} {row['body'].decode()}")
    client.commit_offset("billing", mq, refunds.next_begin_offset)
    offset = client.committed_offset("billing", MessageQueue("orders", mq.broker_name, mq.queue_id))
    print(f"group billing committed offset {offset} on queue {mq.queue_id}")


if __name__ == "__main__":
    main()
