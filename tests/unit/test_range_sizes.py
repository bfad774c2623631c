"""store.sizes.measure: a range's record bytes and how far a byte budget goes."""

from __future__ import annotations

import numpy as np

from rmq_spark.store.sizes import measure


def test_total_and_budget_over_exact_sizes():
    sizes = np.array([100, 200, 300, 400])
    assert measure(sizes) == (1000, False, None)
    assert measure(sizes, 0).budget_count == 1  # one message always, for progress
    assert measure(sizes, 299).budget_count == 1
    assert measure(sizes, 300).budget_count == 2
    assert measure(sizes, 10_000).budget_count == 4
    assert measure(np.zeros(0, np.int64), 100) == (0, False, 0)


def test_a_range_longer_than_the_scan_is_extrapolated_and_says_so():
    scanned = np.full(10, 50)
    size = measure(scanned, budget_bytes=1000, total_count=100)
    assert size.size_bytes == 5000 and size.estimated
    assert size.budget_count == 20  # 500 bytes scanned, the rest at 50 bytes each
