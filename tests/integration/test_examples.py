"""The push consumer examples as a user runs them: ``python examples/X.py`` processes that
must exit 0 and print what they promise.

Only the broker/push examples run here; the Spark examples are slow and covered elsewhere.
"""

from __future__ import annotations

import re

from tests.support.examples import run_example


def test_push_consumer_example_retries_then_dead_letters_the_poison_order():
    out = run_example("push_consumer.py").stdout

    # a flaky order: failed twice (first delivery, then from the retry topic), paid at the
    # third delivery, with the same msg_id every time
    deliveries = re.findall(
        r"order\s+4\s+reconsume_times (\d)\s+from (\S+)\s+msg_id (\w+)\s+-> (paid|FAILED)", out
    )
    assert [(rt, src, status) for rt, src, _, status in deliveries] == [
        ("0", "orders", "FAILED"),
        ("1", "%RETRY%payments", "FAILED"),
        ("2", "%RETRY%payments", "paid"),
    ], out
    assert len({msg_id for _, _, msg_id, _ in deliveries}) == 1, out

    # the poison order: first delivery + max_reconsume_times (3) retries, all failed ...
    poison = re.findall(
        r"order\s+13\s+reconsume_times (\d)\s+\S+\s+\S+\s+msg_id \w+\s+-> (\w+)", out
    )
    assert poison == [("0", "FAILED"), ("1", "FAILED"), ("2", "FAILED"), ("3", "FAILED")], out
    # ... then it is read back from the dead-letter queue
    assert "dead-letter queue '%DLQ%payments' holds 1 message(s):" in out, out
    assert re.search(r"order 13 \(msg_id \w+, first topic orders\) after 4 deliveries", out), out
    assert "'dead_lettered': 1" in out, out
    # every queue committed to its end
    committed = re.findall(r"(orders#\d|%RETRY%payments#0): committed \d+, max \d+, lag (\d+)", out)
    assert len(committed) == 5 and all(lag == "0" for _, lag in committed), out
    assert "19 of 20 orders paid, order 13 in the DLQ: OK" in out, out


def test_rebalance_demo_hands_queues_over_without_loss_or_duplicates():
    out = run_example("rebalance_demo.py").stdout

    # the three membership changes, each settled with the 8 queues shared out evenly
    for step in (
        r"member-1 joins\s+[\d.]+ s\s+member-1 \[0, 1, 2, 3, 4, 5, 6, 7\]",
        r"member-2 and member-3 join\s+[\d.]+ s\s+member-1 \[[\d, ]+\] \| member-2 \[[\d, ]+\]"
        r" \| member-3 \[[\d, ]+\]$",
        r"member-2 leaves \(graceful shutdown\)\s+[\d.]+ s\s+member-1 \[[\d, ]+\] \| "
        r"member-3 \[[\d, ]+\]$",
    ):
        assert re.search(step, out, re.MULTILINE), f"no line matching {step!r}\n{out}"
    assert "NOT SETTLED" not in out, out

    sent = int(re.search(r"^total sent\s+([\d,]+)$", out, re.MULTILINE)[1].replace(",", ""))
    unique = int(re.search(r"^delivered unique\s+([\d,]+)$", out, re.MULTILINE)[1].replace(",", ""))
    assert sent > 0 and unique == sent, out
    assert re.search(r"^lost\s+0$", out, re.MULTILINE), out
    assert re.search(r"^duplicates\s+0$", out, re.MULTILINE), out
    assert re.search(r"lost 0, duplicates 0", out), out
    # every member got messages while it was in the group
    for member in ("member-1", "member-2", "member-3"):
        count = re.search(rf"^  {member}\s+([\d,]+)$", out, re.MULTILINE)
        assert count and int(count[1].replace(",", "")) > 0, out


def test_rocketmq5_client_example_mixes_official_clients_with_rocketlite():
    out = run_example("rocketmq5_client.py").stdout

    assert "official producer sent 6 orders" in out, out
    # the order asked for again comes back as attempt 2; the others are attempt 1
    later = re.search(r"2\. (order-\d): asked to see it again", out)
    assert later, out
    assert f"received {later[1]} tag Paid attempt 2" in out, out
    assert len(re.findall(r"received order-\d tag Paid attempt 1", out)) == 3, out
    # each customer's FIFO events in order
    assert "customer ann: steps [0, 1, 2, 3, 4]" in out, out
    assert "customer bob: steps [0, 1, 2, 3, 4]" in out, out
    # rocketlite's own reader sees the official client's id, keys and tag
    assert "PullConsumer read 6 orders" in out and "keys=order-0 tags=Refunded" in out, out
    assert "group billing on orders: lag 0" in out, out
    assert "group shipping on customer-events: lag 0" in out, out


def test_remoting_clients_example_sends_filters_and_commits_over_rocketmqs_protocol():
    out = run_example("remoting_clients.py").stdout
    name_server = re.search(r"namesrvAddr=(127\.0\.0\.1:\d+)", out)
    assert name_server, out
    assert f"route of orders: 2 queues on {{'broker-a': '{name_server.group(1)}'}}" in out
    refunds = re.findall(r"refund at offset (\d+): (order-\d+)", out)
    assert refunds == [("0", "order-0"), ("3", "order-3"), ("6", "order-6")], out
    # committed over remoting, read back over gRPC: one offset table for both protocols
    assert "group billing committed offset 9 on queue 0" in out
    assert "gRPC sees group billing at 9 on queue 0" in out


def test_metrics_example_reads_readiness_and_a_groups_lag_from_the_http_port():
    out = run_example("metrics_and_health.py").stdout
    assert "/readyz: 200 ready" in out, out
    assert "messages in (orders): 300" in out and "messages out to billing: 200" in out, out
    for queue in (0, 1):
        found = re.search(
            rf"billing on queue {queue}: lag 75 messages \((\d+) ms\), in flight 25, ready 50",
            out,
        )
        assert found and int(found.group(1)) > 0, out
    assert re.search(r"console: http://127\.0\.0\.1:\d+/", out), out
