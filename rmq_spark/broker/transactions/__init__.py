"""RocketMQ's transactional messages: half messages and their end (:mod:`.service`), the
rules without I/O (:mod:`.state`) and the checks of orphaned ones (:mod:`.checks`)."""
