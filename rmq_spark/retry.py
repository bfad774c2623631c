"""Waits between the attempts of a retried call: each one ``factor`` times the last, capped.

The callers own their loops (what is retried, what is logged, how a wait is cut short);
they take their waits from :func:`backoff_delays`, so every retry in the package grows the
same way. (Messages a consumer sends back for redelivery are
:mod:`rmq_spark.broker.delivery.retry`.)
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["backoff_delays"]


def backoff_delays(initial: float, maximum: float, factor: float = 2) -> Iterator[float]:
    """``initial``, ``initial * factor``, ... each at most ``maximum``; endless (take as
    many as there are retries). A zero ``initial`` stays zero.

    >>> import itertools
    >>> list(itertools.islice(backoff_delays(100, 1000), 6))
    [100, 200, 400, 800, 1000, 1000]
    """
    if initial < 0 or maximum < 0 or factor < 1:
        raise ValueError(
            f"backoff initial={initial!r}, maximum={maximum!r}, factor={factor!r}: need "
            "initial >= 0, maximum >= 0 and factor >= 1"
        )
    delay = initial
    while True:
        if delay >= maximum:
            while True:
                yield maximum
        yield delay
        delay *= factor
