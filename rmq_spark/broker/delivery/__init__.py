"""Messages delivered later than they were sent: RocketMQ's delay levels (:mod:`.schedule`),
RocketMQ 5's timer messages (:mod:`.timer`) and a consumer's send-backs to its group's retry
and dead-letter topics (:mod:`.retry`)."""
