"""RocketMQ's remoting protocol served by the broker: the name-server and broker roles on
one port, so Apache RocketMQ's own clients and tools (``namesrvAddr=host:port``) use
rocketlite unchanged. The transport is :mod:`.server`, the request table
:mod:`.service`; the frames themselves are :mod:`rmq_spark.wire.remoting`."""
