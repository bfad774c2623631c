"""How the ``rocketlite`` command prints: aligned tables by default, JSON lines with
``--json``, bodies as text (or base64 when they are not UTF-8)."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import argparse

    import pyarrow as pa


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], out: TextIO | None = None
) -> None:
    """Print ``rows`` as an aligned table with ``columns`` as headers."""
    out = out or sys.stdout
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return str(value)


def print_json_lines(rows: Iterable[dict[str, Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
    out.flush()


def _json_default(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def body_text(body: bytes) -> str:
    """A body as text when it is UTF-8, else as base64 marked so."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(body).decode()


def emit(args: argparse.Namespace, rows: list[dict[str, Any]], columns: list[str]) -> None:
    if args.json:
        print_json_lines(rows)
    else:
        print_table(rows, columns)


def progress(text: str | None) -> None:
    if not sys.stderr.isatty():
        return
    sys.stderr.write("\r\033[K" + (text or ""))
    sys.stderr.flush()


def message_rows(batch: pa.RecordBatch, broker_name: str) -> list[dict[str, Any]]:
    data = batch.to_pydict()
    rows = []
    for i in range(batch.num_rows):
        rows.append(
            {
                "topic": data["topic"][i],
                "brokerName": broker_name,
                "queueId": data["queueId"][i],
                "queueOffset": data["queueOffset"][i],
                "msgId": data["msgId"][i],
                "tags": data["tags"][i],
                "keys": data["keys"][i],
                "storeTimestamp": data["storeTimestamp"][i],
                "reconsumeTimes": data["reconsumeTimes"][i],
                "properties": dict(data["properties"][i] or []),
                "body": body_text(data["body"][i]),
            }
        )
    return rows


def print_message(args: argparse.Namespace, row: dict[str, Any]) -> None:
    if args.json:
        print_json_lines([row])
    else:
        tags = f" [{row['tags']}]" if row["tags"] else ""
        print(f"{row['brokerName']}/{row['queueId']}@{row['queueOffset']}{tags} {row['body']}")
        sys.stdout.flush()
