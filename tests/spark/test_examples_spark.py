"""The Spark examples as a user runs them: ``python examples/X.py``, exit 0, and what they
print checked."""

from __future__ import annotations

import re

from tests.support import examples


def run_example(name: str) -> str:
    return examples.run_example(name, timeout_s=300).stdout


def test_copy_topic_example_copies_every_paid_order_once():
    out = run_example("copy_topic.py")
    produced = re.search(r"produced 3000 orders to 'orders', (\d+) of them paid", out)
    assert produced, out
    first = re.search(r"the query read (\d+) orders and wrote the (\d+) paid ones", out)
    second = re.search(r"the query read (\d+) and wrote (\d+) more", out)
    assert first and second, out
    assert first.groups() == ("3000", produced[1]) and second.groups() == ("600", "200"), out
    first, second = int(first[2]), int(second[2])
    held = re.search(
        r"holds (\d+) orders for (\d+) paid: (\d+) distinct, (\d+) doubled, "
        r"order per customer kept: (\w+)",
        out,
    )
    assert held, out
    assert held.groups() == (str(first + second),) * 3 + ("0", "True"), out
