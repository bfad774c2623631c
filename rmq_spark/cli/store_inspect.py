"""``rocketlite store inspect DIR [--json]``: what a store directory holds, read with no
broker and without writing a byte (:class:`~rmq_spark.store.offline.StoreView`).

Topics with their queues' offset ranges, the commit log and its segments, the checkpoints,
consumer groups with their offsets and lag, delay-level progress, which software wrote the
store and whether a broker holds it. A live store is read too (as it was when the command
started), and said to be live. Human output is a set of aligned tables; ``--json`` prints
one JSON document with the same facts.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from rmq_spark.cli.commands import perm_text
from rmq_spark.cli.output import print_table
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.names import SCHEDULE_TOPIC

if TYPE_CHECKING:
    from rmq_spark.store.offline import StoreView
    from rmq_spark.store.offline_meta import StoredTopic

#: exit status of a DIR that is missing or not a store (a usage error, as argparse's)
USAGE_ERROR = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``store inspect`` to the ``rocketlite`` subcommands ``sub``."""
    store = sub.add_parser("store", help="look into a store directory without a broker")
    actions = store.add_subparsers(dest="action", required=True, metavar="ACTION")
    inspect = actions.add_parser(
        "inspect",
        help="topics, offsets, commit log, checkpoints and groups of a store directory "
        "(rocketlite's or Apache RocketMQ's), read only",
    )
    inspect.add_argument("dir", metavar="DIR", help="the store directory (holding commitlog/)")
    inspect.add_argument("--json", action="store_true", help="one JSON document")
    inspect.set_defaults(func=cmd_store_inspect)


def cmd_store_inspect(args: argparse.Namespace) -> int:
    from rmq_spark.store.offline import StoreView

    try:
        view = StoreView.open(args.dir, allow_live=True)
    except (NotFoundError, InvalidArgumentError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    with view:
        report = inspect_store(view)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print_report(report)
    return 0


# -- the facts ---------------------------------------------------------------------------


def inspect_store(view: StoreView) -> dict[str, Any]:
    """Everything ``store inspect`` shows, as one JSON-able document."""
    kind, markers = view.kind
    low, high = view.commitlog_range()
    geometry = view.geometry
    topics = [_topic(view, name, t) for name, t in view.topics().items()]
    maxima = {(t["topic"], q["queueId"]): q["max"] for t in topics for q in t["queues"]}
    return {
        "store": str(view.root),
        "kind": kind,
        "kindEvidence": markers,
        "live": view.live,
        "lockHolder": view.lock_holder,
        "cleanShutdown": view.clean_shutdown,
        "geometry": {
            "commitlogSegmentBytes": geometry.commitlog_segment_bytes,
            "consumequeueEntriesPerFile": geometry.consumequeue_entries_per_file,
            "recorded": geometry.recorded,
        },
        "commitlog": {
            "minOffset": low,
            "maxOffset": high,
            "segments": [
                {
                    "name": s.name,
                    "startOffset": s.start_offset,
                    "fileBytes": s.file_bytes,
                    "writtenBytes": s.written_bytes,
                }
                for s in view.segments()
            ],
        },
        "checkpoints": _checkpoints(view),
        "topics": topics,
        "consumerGroups": _groups(view, maxima),
        "subscriptionGroups": view.subscription_groups(),
        "delayLevels": _delay_levels(view, maxima),
    }


def _topic(view: StoreView, name: str, topic: StoredTopic) -> dict[str, Any]:
    queues = []
    for queue_id in view.queues(name):
        low, high = view.queue_range(name, queue_id)
        queues.append({"queueId": queue_id, "min": low, "max": high, "messages": high - low})
    return {
        "topic": name,
        "configured": topic.configured,
        "readQueues": topic.read_queue_nums,
        "writeQueues": topic.write_queue_nums,
        "perm": topic.perm,
        "messageType": topic.message_type,
        "messages": sum(q["messages"] for q in queues),
        "queues": queues,
    }


def _checkpoints(view: StoreView) -> dict[str, Any]:
    found = view.checkpoints()
    out: dict[str, Any] = {"rocketmq": None, "rocketlite": None}
    if found.rocketmq is not None:
        cp = found.rocketmq
        out["rocketmq"] = {
            **_stamp("physicMsgTimestamp", cp.physic_msg_timestamp),
            **_stamp("logicsMsgTimestamp", cp.logics_msg_timestamp),
            **_stamp("indexMsgTimestamp", cp.index_msg_timestamp),
        }
    if found.rocketlite is not None:
        ours = found.rocketlite
        out["rocketlite"] = {
            "sequence": ours.sequence,
            "safeOffset": ours.safe_offset,
            **_stamp("physicMsgTimestamp", ours.physic_msg_timestamp),
            **_stamp("logicsMsgTimestamp", ours.logics_msg_timestamp),
        }
    return out


def _stamp(name: str, ms: int) -> dict[str, Any]:
    return {name: ms, f"{name}Iso": iso_time(ms)}


def iso_time(ms: int) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC; None for 0 (never written).

    >>> iso_time(1700000000123)
    '2023-11-14T22:13:20.123+00:00'
    """
    if ms <= 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _groups(view: StoreView, maxima: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    groups = []
    for group, offsets in view.consumer_offsets().items():
        rows: list[dict[str, Any]] = []
        for (topic, queue_id), committed in sorted(offsets.items()):
            high = maxima.get((topic, queue_id))
            lag = None if high is None else max(0, high - committed)
            rows.append(
                {"topic": topic, "queueId": queue_id, "committed": committed, "max": high,
                 "lag": lag}
            )  # fmt: skip
        total = sum(r["lag"] for r in rows if r["lag"] is not None)
        groups.append({"group": group, "lag": total, "offsets": rows})
    return groups


def _delay_levels(view: StoreView, maxima: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    delivered = view.delay_offsets()
    written = {q + 1 for (t, q), high in maxima.items() if t == SCHEDULE_TOPIC and high}
    levels = []
    for level in sorted(set(delivered) | written):
        high = maxima.get((SCHEDULE_TOPIC, level - 1))
        offset = delivered.get(level)
        pending = None if high is None else max(0, high - (offset or 0))
        levels.append({"level": level, "offset": offset, "max": high, "pending": pending})
    return levels


# -- printing ----------------------------------------------------------------------------


def print_report(report: dict[str, Any], out: TextIO | None = None) -> None:
    """The report as headed, aligned tables."""
    out = out or sys.stdout
    for label, value in _summary(report):
        print(f"{label:<11}{value}", file=out)
    sections = [
        ("Segments", report["commitlog"]["segments"],
         ["name", "startOffset", "fileBytes", "writtenBytes"]),
        ("Checkpoints", _checkpoint_rows(report["checkpoints"]),
         ["checkpoint", "physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp",
          "safeOffset"]),
        ("Topics", [{**t, "perm": _perm(t["perm"])} for t in report["topics"]],
         ["topic", "readQueues", "writeQueues", "perm", "messages"]),
        ("Queues", _queue_rows(report["topics"]), ["topic", "queueId", "min", "max", "messages"]),
        ("Consumer groups", _group_rows(report["consumerGroups"]),
         ["group", "topic", "queueId", "committed", "max", "lag"]),
        ("Delay levels", report["delayLevels"], ["level", "offset", "max", "pending"]),
    ]  # fmt: skip
    unwritten = sum(1 for t in report["topics"] for q in t["queues"] if not q["max"])
    for title, rows, columns in sections:
        print(f"\n{title}", file=out)
        if rows:
            print_table(rows, columns, out=out)
        else:
            print("  (none)", file=out)
        if title == "Queues" and unwritten:
            print(f"({unwritten} queues that never held a message are not listed)", file=out)
    if report["subscriptionGroups"]:
        print(f"\nSubscription groups: {', '.join(report['subscriptionGroups'])}", file=out)


def _summary(report: dict[str, Any]) -> list[tuple[str, str]]:
    evidence = ", ".join(report["kindEvidence"])
    if report["live"]:
        state = f"LIVE: held by {report['lockHolder']}; figures as of now"
    elif report["cleanShutdown"]:
        state = "closed cleanly"
    else:
        state = "not closed cleanly (abort file left: the broker crashed or was killed)"
    geo = report["geometry"]
    sizes = (
        f"segments of {_num(geo['commitlogSegmentBytes'])} bytes, "
        f"{_num(geo['consumequeueEntriesPerFile'])} entries per consume-queue file "
        f"({'recorded' if geo['recorded'] else 'read from the files'})"
    )
    log = report["commitlog"]
    return [
        ("store", report["store"]),
        ("written by", f"{report['kind']}" + (f" ({evidence})" if evidence else "")),
        ("state", state),
        ("geometry", sizes),
        ("commit log", f"[{log['minOffset']:,}, {log['maxOffset']:,}) bytes in "
                       f"{len(log['segments'])} segment(s)"),
    ]  # fmt: skip


def _perm(perm: int | None) -> str | None:
    return None if perm is None else perm_text(perm)


def _num(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _checkpoint_rows(checkpoints: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, cp in checkpoints.items():
        if cp is None:
            continue
        row = {"checkpoint": key, "safeOffset": cp.get("safeOffset")}
        for field in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp"):
            if field in cp:
                row[field] = cp[f"{field}Iso"]  # None (never written) prints as "-"
        rows.append(row)
    return rows


def _queue_rows(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"topic": t["topic"], **q} for t in topics for q in t["queues"] if q["max"]]


def _group_rows(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"group": g["group"], **row} for g in groups for row in g["offsets"]]
