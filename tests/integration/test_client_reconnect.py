"""A client finds a restarted broker again within about a second, not at the end of its
retry schedule: the reconnect backoff is capped and retries wait for the connection."""

from __future__ import annotations

import threading
import time

from rmq_spark.client.connection import ClientConfig, Connection, RetryPolicy
from rmq_spark.errors import UnavailableError
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2
from tests.support.broker_harness import free_port


def test_a_call_made_during_an_outage_completes_soon_after_the_restart(broker_factory):
    broker = broker_factory("broker-a", "--port", str(free_port()))
    # Retries at about 2, 6 and 14 s after the failure (2 s backoff, doubling).
    config = ClientConfig(retry=RetryPolicy(attempts=4, backoff_ms=2_000, max_backoff_ms=30_000))
    conn = Connection(broker.endpoint, config)
    try:
        conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
        broker.kill()
        back_at: list[float] = []

        def restart_later() -> None:
            time.sleep(2.5)  # just after the first retry
            broker.start()
            back_at.append(time.monotonic())

        restarter = threading.Thread(target=restart_later)
        restarter.start()
        answer = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
        answered_at = time.monotonic()
        restarter.join()
        assert answer.broker_name == "broker-a"
        # A fixed schedule would answer at its next retry, 6 s after the failure (2.5 s or
        # more after the broker is back), or later if gRPC's own reconnect backoff had not
        # tried again by then.
        assert answered_at - back_at[0] < 1.5
    finally:
        conn.close()


def test_a_broker_that_stays_down_fails_after_the_whole_schedule(broker_factory):
    broker = broker_factory("broker-a", "--port", str(free_port()))
    config = ClientConfig(retry=RetryPolicy(attempts=3, backoff_ms=300, max_backoff_ms=30_000))
    conn = Connection(broker.endpoint, config)
    try:
        broker.kill()
        started = time.monotonic()
        try:
            conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
        except UnavailableError as exc:
            assert "gave up after 3 attempts" in str(exc)
        else:
            raise AssertionError("a call to a dead broker succeeded")
        assert 0.7 < time.monotonic() - started < 3.0  # 0.3 + 0.6 s, with jitter
    finally:
        conn.close()
