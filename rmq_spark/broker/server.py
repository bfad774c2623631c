"""Build and run the gRPC server: ``create_server(config) -> (server, port)`` and ``serve``."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from concurrent import futures

import grpc

from rmq_spark.broker.admin import AdminServicer
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core import Broker
from rmq_spark.broker.group_service import GroupServicer
from rmq_spark.broker.messaging import MessagingServicer
from rmq_spark.broker.offset_service import OffsetServicer
from rmq_spark.errors import UnavailableError
from rmq_spark.proto_gen.rocketlite.v1 import (
    admin_pb2_grpc,
    groups_pb2_grpc,
    messaging_pb2_grpc,
    offsets_pb2_grpc,
)

log = logging.getLogger("rmq_spark.broker")


class BrokerServer:
    """A bound, not yet started broker. ``start()``, then ``stop()`` (or use ``with``)."""

    def __init__(self, broker: Broker, server: grpc.Server, port: int) -> None:
        self.broker = broker
        self.port = port
        self._server = server
        self._stopped = threading.Event()

    @property
    def endpoint(self) -> str:
        return self.broker.endpoint

    def start(self) -> BrokerServer:
        if self._stopped.is_set():  # a signal stopped it before it started
            return self
        self._server.start()
        log.info(
            "broker %s listening on %s (store %s, flush %s)",
            self.broker.name,
            self.broker.endpoint,
            self.broker.config.store_dir,
            self.broker.config.flush_mode,
        )
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop serving (in-flight calls get ``grace_s``), then close the store cleanly."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.broker.notifier.close()  # release long polls so the grace period is short
        self.broker.consumers.close()  # end watch streams
        self._server.stop(grace_s).wait()
        self.broker.close()
        log.info("broker %s stopped", self.broker.name)

    def wait(self) -> None:
        self._stopped.wait()

    def __enter__(self) -> BrokerServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def create_server(config: BrokerConfig) -> tuple[BrokerServer, int]:
    """Bind the port, open (and recover) the store and register the services."""
    options = [
        ("grpc.max_receive_message_length", config.max_request_bytes),
        ("grpc.max_send_message_length", config.max_response_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(config.grpc_workers, thread_name_prefix="rmq-grpc"),
        options=options,
    )
    address = f"{config.host}:{config.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise UnavailableError(f"cannot listen on {address}: {exc}; is the port in use?") from exc
    if port == 0:
        raise UnavailableError(f"cannot listen on {address}; is the port in use?")
    broker = Broker(config, port)
    messaging_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingServicer(broker), server)
    offsets_pb2_grpc.add_OffsetServiceServicer_to_server(OffsetServicer(broker), server)
    groups_pb2_grpc.add_GroupServiceServicer_to_server(GroupServicer(broker), server)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(broker), server)
    return BrokerServer(broker, server, port), port


def serve(config: BrokerConfig, on_started: Callable[[BrokerServer], None] | None = None) -> None:
    """Run a broker in the foreground until SIGTERM or SIGINT, then shut down cleanly.

    ``on_started`` runs once the broker serves (e.g. to announce the bound port).
    """
    broker_server, _ = create_server(config)

    def on_signal(signum, _frame):
        log.info("received %s, shutting down", signal.Signals(signum).name)
        threading.Thread(target=broker_server.stop, name="rmq-shutdown").start()

    # Before start(): whoever sees the broker up may stop it at once, and must get a clean
    # shutdown (a default SIGTERM would leave the store to crash recovery).
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    broker_server.start()
    if on_started is not None:
        on_started(broker_server)
    broker_server.wait()
    # stop() runs in its own thread; wait for it to finish closing the store.
    for thread in threading.enumerate():
        if thread.name == "rmq-shutdown":
            thread.join()
