"""A batch read of a TLS broker: the driver (planning) and the executors (pulls) connect
with the options tls and tlsCaFile; a read without them fails with a TLS hint."""

from __future__ import annotations

import pytest

from rmq_spark.client import Admin, ClientConfig, Producer, ProducerConfig
from tests.support.spark_helpers import batch, rows_of
from tests.support.tls_ca import make_pki


def test_batch_read_through_tls(spark, broker_factory, topic, tmp_path):
    pki = make_pki(tmp_path / "pki")
    tls = ["--tls-cert", str(pki.server), "--tls-key", str(pki.server_key)]
    broker = broker_factory("broker-tls", *tls)
    config = {"tls": True, "tls_ca_file": str(pki.ca)}
    with Admin(broker.endpoint, ClientConfig(**config)) as admin:
        admin.create_topic(topic, queues=2)
    sent = {}
    with Producer(broker.endpoint, config=ProducerConfig(**config)) as producer:
        for queue in (0, 1):
            bodies = [f"q{queue}-{i}".encode() for i in range(25)]
            results = producer.send_batch(topic, bodies, queue=queue)
            for result, body in zip(results, bodies, strict=True):
                sent[("broker-tls", queue, result.queue_offset)] = body

    df = batch(spark, broker.endpoint, topic, tls="true", tlsCaFile=str(pki.ca))
    assert rows_of(df) == sent

    with pytest.raises(Exception, match="TLS") as info:
        batch(spark, broker.endpoint, topic, maxRetries="0").collect()
    assert "tls" in str(info.value).lower()
    # Spark wraps errors of the source's options in its own AnalysisException
    with pytest.raises(Exception, match="option tlsCaFile only applies with tls=true"):
        batch(spark, broker.endpoint, topic, tlsCaFile=str(pki.ca)).collect()
