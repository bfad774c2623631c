"""Everything about consumer offsets.

- :mod:`rmq_spark.offsets.broker_table`: the broker's consumer-offset table (the server side
  of RocketMQ's RemoteBrokerOffsetStore), and :mod:`rmq_spark.offsets.json_codec`, its file
  format.
- :mod:`rmq_spark.offsets.spark`: the Spark source's offsets (``{topic: {brokerName:
  {queueId: nextOffset}}}`` in the query's checkpoint), the ``startingOffsets`` /
  ``endingOffsets`` option documents and the data-loss descriptions. The source also writes
  its progress to the broker table for its ``group`` (``rocketlite offsets GROUP``), but
  the checkpoint is what a restarted query resumes from.

- :mod:`rmq_spark.offsets.store`: the client's ``OffsetStore`` family (RocketMQ's names):
  :mod:`~rmq_spark.offsets.local_file` (``LocalFileOffsetStore``, broadcasting: a JSON file
  per client and group) and :mod:`~rmq_spark.offsets.remote_broker`
  (``RemoteBrokerOffsetStore``, clustering: the broker's table over the wire).

A committed offset is always the *next* offset to consume in its queue.
"""
