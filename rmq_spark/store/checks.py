"""Checks of a read's or a write's arguments against a topic's config and the store's
limits. Pure: each returns nothing or raises the error the caller sees, naming the bad
value and what to do. A write runs them before it takes the store's write lock.
"""

from __future__ import annotations

import numpy as np

from rmq_spark.codec import record as rec
from rmq_spark.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from rmq_spark.store.topics import TopicConfig

# -- writes --------------------------------------------------------------------------------


def check_writable(topic: str, config: TopicConfig) -> None:
    """PermissionDenied unless ``topic`` (whose config is ``config``) may be written."""
    if not config.is_writable:
        raise PermissionDeniedError(
            f"topic {topic!r} is not writable (perm {config.perm}); "
            "update it with perm 6 to allow writes"
        )


def check_write_queue(topic: str, queue_id: object, config: TopicConfig) -> None:
    """InvalidArgument unless ``queue_id`` is one of ``topic``'s write queues."""
    if not isinstance(queue_id, int) or not 0 <= queue_id < config.write_queue_nums:
        raise InvalidArgumentError(
            f"queue id {queue_id!r} is out of range for topic {topic!r}: "
            f"it has {config.write_queue_nums} write queues (0..{config.write_queue_nums - 1})"
        )


def check_body_sizes(body_lens: np.ndarray, limit: int) -> None:
    """InvalidArgument naming the largest of the ``body_lens`` (one per message of a batch;
    the first of equals) when it is over ``limit`` bytes."""
    if body_lens.max() > limit:
        i = int(np.argmax(body_lens))
        raise InvalidArgumentError(
            f"message {i}: body of {int(body_lens[i])} bytes exceeds the limit of {limit} bytes"
        )


def check_record_sizes(sizes: np.ndarray, segment_bytes: int) -> None:
    """InvalidArgument if a record of ``sizes`` does not fit in a commit-log segment of
    ``segment_bytes`` (with room left for the blank marker that ends a full segment)."""
    too_big = sizes > segment_bytes - rec.BLANK_MARKER_SIZE
    if too_big.any():
        raise InvalidArgumentError(
            f"a record of {int(sizes[too_big][0])} bytes does not fit in a "
            f"commit-log segment of {segment_bytes} bytes"
        )


# -- reads ---------------------------------------------------------------------------------


def check_read_args(offset: object, max_count: object, max_bytes: object) -> None:
    """InvalidArgument unless ``offset`` is a whole number and ``max_count`` and
    ``max_bytes`` are whole numbers >= 1."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidArgumentError(f"offset {offset!r} must be a whole number")
    if not isinstance(max_count, int) or max_count < 1:
        raise InvalidArgumentError(f"max_count {max_count!r} must be a whole number >= 1")
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidArgumentError(f"max_bytes {max_bytes!r} must be a whole number >= 1")


def check_queue_id(queue_id: object) -> None:
    """InvalidArgument unless ``queue_id`` is a whole number >= 0."""
    if not isinstance(queue_id, int) or queue_id < 0:
        raise InvalidArgumentError(f"queue id {queue_id!r} must be a whole number >= 0")


def check_read_queue(topic: str, queue_id: int, config: TopicConfig | None) -> None:
    """NotFound unless ``topic`` exists (``config`` is its config, None when it does not)
    and has a queue ``queue_id``, counting read and write queues alike."""
    if config is None:
        raise NotFoundError(
            f"topic {topic!r} does not exist; create it first (rocketlite topic create)"
        )
    if queue_id >= max(config.read_queue_nums, config.write_queue_nums):
        raise NotFoundError(
            f"topic {topic!r} has {config.read_queue_nums} read queues; "
            f"queue {queue_id} does not exist"
        )
