"""Fixtures for tests against real brokers (helpers in ``tests/support/broker_harness.py``).

* ``broker_factory`` starts brokers as separate processes (``python -m rmq_spark.broker``) on
  port 0 with their own store directory and reads the bound port from the ready line. The
  handles stop, kill and restart them; every process is gone after the test.
* ``in_process_broker`` (and ``in_process_broker_factory`` for other settings) runs a broker
  inside the test process: faster to start, for tests that do not need a process boundary.
* ``connect(endpoint)`` gives generated stubs on one channel, closed after the test.
* ``java`` runs Apache RocketMQ's Java client (``tests/support/java_probe.py``), compiled
  once per module; tests that use it carry ``java_probe.NEEDS_JAVA``.

Broker stderr goes to ``<tmp>/<name>.log``; failures to start show its tail.
"""

from __future__ import annotations

import grpc
import pytest

from tests.support import java_probe
from tests.support.broker_harness import (
    CHANNEL_OPTIONS,
    TEST_STORE_FLAGS,
    BrokerProcess,
    LocalBroker,
    Stubs,
    start_in_process_broker,
)


@pytest.fixture
def connect():
    """``connect(endpoint, options=None) -> Stubs``; channels close after the test."""
    channels: list[grpc.Channel] = []

    def open_stubs(endpoint: str, options: list[tuple[str, int]] | None = None) -> Stubs:
        channel = grpc.insecure_channel(endpoint, options=options or CHANNEL_OPTIONS)
        grpc.channel_ready_future(channel).result(timeout=10)
        channels.append(channel)
        return Stubs(channel)

    yield open_stubs
    for channel in channels:
        channel.close()


# -- brokers in their own process ----------------------------------------------------------


@pytest.fixture
def broker_factory(tmp_path):
    """``broker_factory(name="broker-a", *flags) -> BrokerProcess`` (started); each broker
    gets ``tmp_path/<name>`` as its store. All are stopped (or killed) after the test."""
    brokers: list[BrokerProcess] = []

    def start(name: str = "broker-a", *flags: str, store_flags=TEST_STORE_FLAGS) -> BrokerProcess:
        broker = BrokerProcess(
            name, tmp_path / name, tmp_path / f"{name}.log", [*store_flags, *flags]
        )
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.clean_up()


# -- brokers inside the test process -------------------------------------------------------


@pytest.fixture
def in_process_broker_factory(tmp_path):
    """``in_process_broker_factory(**BrokerConfig overrides) -> LocalBroker`` (started)."""
    started: list[LocalBroker] = []

    def start(**overrides) -> LocalBroker:
        local = start_in_process_broker(tmp_path / f"inproc-{len(started)}", **overrides)
        started.append(local)
        return local

    yield start
    for local in started:
        local.stop()


@pytest.fixture
def in_process_broker(in_process_broker_factory) -> LocalBroker:
    return in_process_broker_factory()


# -- Apache RocketMQ's Java client ----------------------------------------------------------


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    """``java(*args, timeout_s=...) -> stdout lines`` running RemotingProbe, with
    ``java.start(*args)`` and ``java.mqadmin(*args)`` (see ``java_probe.compile_probe``)."""
    return java_probe.compile_probe(tmp_path_factory.mktemp("java"))
