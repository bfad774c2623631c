"""What a consumer reads of a topic (``ReadFilter``: tags or a SQL92 selector) and what a
group member's heartbeat leaves in the broker's registry (its expression types)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rmq_spark.broker.membership.groups import ConsumerRegistry
from rmq_spark.client.consumer import ReadFilter
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.filter import SelectorError


def test_tags_are_normalised_and_checked_again_on_the_client():
    tags = ReadFilter.of("TagA ||TagB")
    assert (tags.expression, tags.expression_type, tags.wire_type) == ("TagA || TagB", "TAG", "")
    batch = pa.RecordBatch.from_pydict({"tags": ["TagA", "TagC", None, "TagB"]})
    assert tags.keep(batch).column("tags").to_pylist() == ["TagA", "TagB"]


def test_a_sql92_selector_is_sent_as_written_and_nothing_is_checked_again():
    selector = ReadFilter.of(sql="region = 'eu'")
    assert (selector.expression, selector.wire_type) == ("region = 'eu'", "SQL92")
    batch = pa.RecordBatch.from_pydict({"tags": ["TagA", None]})
    assert selector.keep(batch).num_rows == 2  # the broker's answer is exact


def test_a_malformed_selector_fails_naming_the_column():
    with pytest.raises(SelectorError) as error:
        ReadFilter.of(sql="region = ")
    assert error.value.column == 10
    assert "column 10" in str(error.value)


def test_tags_and_a_selector_together_are_refused():
    with pytest.raises(InvalidArgumentError, match="TAGS = 'TagA'"):
        ReadFilter.of("TagA", sql="region = 'eu'")
    assert ReadFilter.of("*", sql="TRUE").expression_type == "SQL92"  # "*" is no filter


def test_the_registry_keeps_each_subscriptions_expression_type():
    registry = ConsumerRegistry(session_timeout_ms=60_000, sweep_interval_ms=0)
    subs = [("orders", "region = 'eu'"), ("%RETRY%g", "*")]
    assert registry.heartbeat("c1", "g", subs, expression_types={"orders": "SQL92"})
    info = registry.consumer_info("g", "c1")
    assert info is not None
    assert info.expression_type("orders") == "SQL92"
    assert info.expression_type("%RETRY%g") == "TAG"
    # the same heartbeat again changes nothing; the same text as tags is another filter
    assert not registry.heartbeat("c1", "g", subs, expression_types={"orders": "SQL92"})
    assert registry.heartbeat("c1", "g", subs)
    info = registry.consumer_info("g", "c1")
    assert info is not None and info.expression_types == ()
