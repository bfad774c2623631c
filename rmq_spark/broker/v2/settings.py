"""What the broker answers to a client's ``Settings`` over ``Telemetry``. Pure.

A RocketMQ 5 client sends its settings when it opens a Telemetry stream and every five
minutes; the server answers with the same settings completed by its own values. Clients
depend on those values: a producer takes its maximum body size from the answer (a missing
one makes every send fail on the client), a push consumer fixes FIFO or concurrent
consumption for life from the first answer, and takes its long-polling timeout and its
retry backoff from it.
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

#: RocketMQ's default retry delays of a concurrent consumer group (customized backoff)
RETRY_DELAYS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                  3600, 7200)  # fmt: skip
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_S = 20
PRODUCER_MAX_ATTEMPTS = 3


def producer_settings(
    client: pb.Settings, *, max_body_bytes: int, validate_message_type: bool = True
) -> pb.Settings:
    answer = pb.Settings()
    answer.CopyFrom(client)
    answer.publishing.max_body_size = max_body_bytes
    answer.publishing.validate_message_type = validate_message_type
    policy = answer.backoff_policy
    policy.Clear()
    policy.max_attempts = PRODUCER_MAX_ATTEMPTS
    policy.exponential_backoff.initial.FromMilliseconds(10)
    policy.exponential_backoff.max.FromMilliseconds(1000)
    policy.exponential_backoff.multiplier = 2.0
    return answer


def consumer_settings(client: pb.Settings, *, fifo: bool, max_attempts: int) -> pb.Settings:
    answer = pb.Settings()
    answer.CopyFrom(client)
    sub = answer.subscription
    sub.fifo = fifo
    sub.receive_batch_size = RECEIVE_BATCH_SIZE
    sub.long_polling_timeout.FromSeconds(LONG_POLLING_S)
    policy = answer.backoff_policy
    policy.Clear()
    policy.max_attempts = max_attempts
    for seconds in RETRY_DELAYS_S:
        policy.customized_backoff.next.add().FromSeconds(seconds)
    return answer


def is_consumer(client_type: int) -> bool:
    return client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER)
