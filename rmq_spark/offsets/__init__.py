"""Everything about consumer offsets.

Today: the broker's consumer-offset table (:mod:`rmq_spark.offsets.broker_table`, the server
side of RocketMQ's RemoteBrokerOffsetStore) and its JSON codec
(:mod:`rmq_spark.offsets.json_codec`). Later: the client's local and remote offset stores and
the Spark source's offset model.

A committed offset is always the *next* offset to consume in its queue.
"""
