"""The waits of retried calls: doubling from the first wait, capped."""

from __future__ import annotations

import itertools

import pytest

from rmq_spark.client.connection import RetryPolicy
from rmq_spark.retry import backoff_delays


@pytest.mark.parametrize(
    ("initial", "maximum", "factor", "delays"),
    [
        (100, 1_000, 2, [100, 200, 400, 800, 1_000, 1_000]),
        (1_000, 10_000, 2, [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]),
        (300, 300, 2, [300, 300, 300, 300, 300, 300]),
        (0, 10_000, 2, [0, 0, 0, 0, 0, 0]),
        (5_000, 1_000, 2, [1_000, 1_000, 1_000, 1_000, 1_000, 1_000]),
        (0.5, 5.0, 2, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]),
        (10, 1_000, 3, [10, 30, 90, 270, 810, 1_000]),
        (7, 100, 1, [7, 7, 7, 7, 7, 7]),
    ],
)
def test_delays(initial: float, maximum: float, factor: float, delays: list[float]) -> None:
    assert list(itertools.islice(backoff_delays(initial, maximum, factor), 6)) == delays


@pytest.mark.parametrize(("initial", "maximum", "factor"), [(-1, 10, 2), (1, -10, 2), (1, 10, 0.5)])
def test_nonsense_is_refused(initial: float, maximum: float, factor: float) -> None:
    with pytest.raises(ValueError, match="need initial >= 0, maximum >= 0 and factor >= 1"):
        next(backoff_delays(initial, maximum, factor))


def test_the_client_retry_policy_waits_the_same_with_jitter() -> None:
    waits = list(RetryPolicy(attempts=6, backoff_ms=100, max_backoff_ms=500).delays_s())
    assert len(waits) == 5
    for got, base_ms in zip(waits, [100, 200, 400, 500, 500], strict=True):
        assert base_ms * 0.8 / 1000 <= got <= base_ms * 1.2 / 1000
