"""The driver's side of the sink: ending a batch on every broker (exactly once).

Every broker ends the batch with EndSinkBatch. The *coordinator* (the broker behind the
first of the ``endpoints``, the same on every run of a query) is asked first: it records the
batch's decision, or answers the one it recorded when the batch was committed before (a
replay after the driver died), and the other brokers are then ended with the decision the
coordinator holds. A broker commits its part of that decision once, and rolls back every
other pending transaction of the sink (failed task attempts, the replay's own rows).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from rmq_spark.client.cluster import Cluster
from rmq_spark.errors import RocketliteError
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.send import SinkCommit
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2

log = logging.getLogger("rmq_spark.sink")

__all__ = ["BatchEnd", "abort_batch", "decision_of", "end_batch"]

Decision = dict[str, list[tuple[str, int]]]


@dataclass(frozen=True)
class BatchEnd:
    batch_id: int
    #: True when the batch had been committed before (a replay): nothing new is visible
    replayed: bool
    committed_messages: int
    rolled_back: int


def decision_of(messages: Iterable[SinkCommit | None]) -> Decision:
    """The batch's transactions per broker, from the tasks' commit messages."""
    decision: Decision = {}
    for message in messages:
        if message is None:
            continue
        for broker, (txn, count) in message.parts.items():
            decision.setdefault(broker, []).append((txn, count))
    return decision


def _to_pb(decision: Decision) -> list[messaging_pb2.SinkBrokerPart]:
    return [
        messaging_pb2.SinkBrokerPart(
            broker_name=broker,
            transactions=[
                messaging_pb2.SinkTransactionCount(transaction_id=txn, messages=count)
                for txn, count in parts
            ],
        )
        for broker, parts in sorted(decision.items())
    ]


def _from_pb(parts: Iterable[messaging_pb2.SinkBrokerPart]) -> Decision:
    return {
        part.broker_name: [(t.transaction_id, t.messages) for t in part.transactions]
        for part in parts
    }


def end_batch(
    options: SinkOptions, sink_id: str, batch_id: int, messages: Iterable[SinkCommit | None]
) -> BatchEnd:
    """Commit batch ``batch_id`` of sink ``sink_id`` on every broker."""
    decision = decision_of(messages)
    cluster = Cluster(options.endpoints, options.client_config())
    try:
        coordinator_endpoint = cluster.endpoints.addresses[0]
        coordinator = cluster.broker_name_of(coordinator_endpoint)
        answer = _end(cluster, coordinator_endpoint, sink_id, batch_id, True, decision)
        held = _from_pb(answer.decision)
        replayed = answer.already_committed
        committed, rolled_back = answer.committed_messages, answer.rolled_back_transactions
        needed = {cluster.endpoint_of(broker) for broker in held if broker != coordinator}
        others = [ep for ep in cluster.endpoints.addresses if ep != coordinator_endpoint]
        for endpoint in sorted(needed) + [ep for ep in others if ep not in needed]:
            try:
                other = _end(cluster, endpoint, sink_id, batch_id, True, held)
            except RocketliteError as exc:
                if endpoint in needed:
                    raise  # its part is not visible yet: the batch must not be called done
                log.warning("sink %s: cannot roll back strays on %s: %s", sink_id, endpoint, exc)
                continue
            committed += other.committed_messages
            rolled_back += other.rolled_back_transactions
        if replayed:
            log.info(
                "sink %s: batch %d was committed before; its replay was rolled back",
                sink_id,
                batch_id,
            )
        return BatchEnd(batch_id, replayed, committed, rolled_back)
    finally:
        cluster.close()


def abort_batch(options: SinkOptions, sink_id: str, batch_id: int) -> int:
    """Roll back every pending transaction of the sink on every broker; returns how many."""
    cluster = Cluster(options.endpoints, options.client_config())
    try:
        total = 0
        for endpoint in cluster.endpoints.addresses:
            total += _end(cluster, endpoint, sink_id, batch_id, False, {}).rolled_back_transactions
        return total
    finally:
        cluster.close()


def _end(
    cluster: Cluster,
    endpoint: str,
    sink_id: str,
    batch_id: int,
    commit: bool,
    decision: Decision,
) -> messaging_pb2.EndSinkBatchResponse:
    conn = cluster.connection(endpoint)
    request = messaging_pb2.EndSinkBatchRequest(
        sink_id=sink_id, batch_id=batch_id, commit=commit, decision=_to_pb(decision)
    )
    return conn.call(conn.messaging.EndSinkBatch, request)
