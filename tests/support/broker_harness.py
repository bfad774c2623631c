"""Helpers for tests against real brokers: broker subprocesses, in-process brokers, stubs.

The fixtures of ``tests/integration/conftest.py`` and ``tests/spark/conftest.py`` wrap these;
tests import them for module-scoped brokers.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import PullConsumer
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2_grpc,
    groups_pb2_grpc,
    messaging_pb2_grpc,
    offsets_pb2_grpc,
)

STARTUP_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]
#: small segments keep test stores small; everything else is the broker's default
#: small files: a test store takes little disk (the message index's slot table is
#: allocated when its file is made: 256 KiB here, 20 MB with RocketMQ's default sizes)
TEST_STORE_FLAGS = [
    "--commitlog-segment-bytes", "8MiB", "--consumequeue-entries-per-file", "4096",
    "--index-hash-slots", "65536", "--index-max-entries", "262144",
]  # fmt: skip
TEST_STORE_OPTIONS = {
    "commitlog_segment_bytes": 8 << 20,
    "consumequeue_entries_per_file": 4096,
    "index_hash_slots": 65536,
    "index_max_entries": 262144,
}


@dataclass
class Stubs:
    """The four service stubs over one channel to a broker."""

    channel: grpc.Channel
    messaging: messaging_pb2_grpc.MessagingServiceStub = field(init=False)
    offsets: offsets_pb2_grpc.OffsetServiceStub = field(init=False)
    groups: groups_pb2_grpc.GroupServiceStub = field(init=False)
    admin: admin_pb2_grpc.AdminServiceStub = field(init=False)

    def __post_init__(self) -> None:
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(self.channel)
        self.groups = groups_pb2_grpc.GroupServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)


class BrokerProcess:
    """A broker subprocess. ``endpoint`` is valid while it runs; ``restart()`` reuses the
    store directory (the port may change)."""

    def __init__(
        self,
        name: str,
        store_dir: Path,
        log_path: Path,
        args: list[str],
        *,
        file_limit: int | None = None,
    ) -> None:
        self.name = name
        self.store_dir = store_dir
        self.log_path = log_path
        self.args = args
        #: RLIMIT_NOFILE (soft and hard) of the broker process, None to inherit this one's
        self.file_limit = file_limit
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.ready_line = ""

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def remoting_address(self) -> str:
        """The name-server address of its remoting port (started with --remoting-port)."""
        part = self.ready_line.split(" remoting=")
        assert len(part) == 2, f"broker {self.name} serves no remoting port: {self.ready_line}"
        return part[1].split()[0]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self, extra_args: tuple[str, ...] = ()) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rmq_spark.broker",
            "--store",
            str(self.store_dir),
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--name",
            self.name,
            # off unless a test asks for it (a later flag wins): brokers of parallel tests
            # must not race for RocketMQ's default port 9876
            "--remoting-port",
            "off",
            *self.args,
            *extra_args,
        ]

    def start(self, *extra_args: str, env: dict[str, str] | None = None) -> BrokerProcess:
        """Start it and wait until it serves; ``extra_args`` and ``env`` (added to this
        environment) for this start only."""
        self.start_process(*extra_args, env=env)
        self.ready_line = self._read_ready_line()
        self.port = int(self.ready_line.split(" listening on ")[1].split()[0].rsplit(":", 1)[1])
        return self

    def start_process(
        self, *extra_args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        """Start the process without waiting for it to serve (``start`` waits)."""
        assert not self.running, f"broker {self.name} is already running"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(extra_args),
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                preexec_fn=None if self.file_limit is None else self._limit_files,
            )
        return self.process

    def _limit_files(self) -> None:
        """In the child, before exec: its file limit, soft and hard (so the broker cannot
        raise it)."""
        import resource

        assert self.file_limit is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.file_limit, self.file_limit))

    def _read_ready_line(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline().decode()
                if line.startswith("rocketlite broker "):
                    return line.strip()
                if not line:  # stdout closed: the process ended
                    break
        self.kill()
        pytest.fail(
            f"broker {self.name} did not start (exit code {self.process.returncode}); "
            f"log tail:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        return self._signal(signal.SIGTERM, timeout_s)

    def kill(self) -> int:
        """SIGKILL: the broker gets no chance to flush or clean up."""
        return self._signal(signal.SIGKILL, STOP_TIMEOUT_S)

    def wait_exit(self, timeout_s: float) -> int:
        """Wait for the broker to end by itself; its exit code (fails the test on timeout)."""
        process = self.process
        assert process is not None, f"broker {self.name} was never started"
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"broker {self.name} still runs after {timeout_s} s")
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def clean_up(self) -> None:
        """After a test: stop it if it still runs, killing it if a clean stop fails; remove
        the short-circuit socket a killed broker leaves behind."""
        if self.running:
            try:
                self.stop(timeout_s=10)
            except BaseException:
                self.kill()
        if self.port:
            from rmq_spark.broker.v1.short_circuit import default_socket_path

            default_socket_path(self.port).unlink(missing_ok=True)

    def restart(self) -> BrokerProcess:
        if self.running:
            self.stop()
        return self.start()

    def _signal(self, signum: int, timeout_s: float) -> int:
        process = self.process
        assert process is not None, f"broker {self.name} was never started"
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                pytest.fail(f"broker {self.name} ignored {signum!r} for {timeout_s} s")
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def start_broker(
    directory: Path, name: str, *flags: str, store_flags=TEST_STORE_FLAGS
) -> BrokerProcess:
    """A started broker subprocess with its store in ``directory / name`` and its log in
    ``directory / <name>.log``."""
    broker = BrokerProcess(
        name, directory / name, directory / f"{name}.log", [*store_flags, *flags]
    )
    return broker.start()


def free_port() -> int:
    """A loopback port free right now (for a broker that must come back on the same one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_queue(endpoint: str, topic: str, queue_id: int, broker_name: str) -> list[dict]:
    """Every stored message of one queue, read with a PullConsumer."""
    with PullConsumer(endpoint) as puller:
        mq = MessageQueue(topic, broker_name, queue_id)
        puller.assign([mq])
        puller.seek(mq, 0)
        rows: list[dict] = []
        while True:
            result = puller.pull(mq, max_messages=64)
            if result.message_count == 0:
                return rows
            rows += result.batch.to_pylist()


@dataclass
class LocalBroker:
    server: object  # rmq_spark.broker.BrokerServer
    endpoint: str
    store_dir: Path

    @property
    def broker(self):
        return self.server.broker

    def stop(self) -> None:
        self.server.stop(grace_s=0.5)


def start_in_process_broker(store_dir: Path, **overrides) -> LocalBroker:
    """A started broker inside this process; BrokerConfig ``overrides`` on test defaults."""
    settings = {
        "store_dir": store_dir,
        "port": 0,
        "name": "broker-t",
        "delay_levels": "200ms 500ms 1s",
        "store_options": dict(TEST_STORE_OPTIONS),
    }
    settings.update(overrides)
    server, port = create_server(BrokerConfig(**settings))
    server.start()
    return LocalBroker(server, f"127.0.0.1:{port}", Path(store_dir))
