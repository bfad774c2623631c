"""The web console on the HTTP port: a page at ``/`` (plain HTML, CSS and JavaScript from
``console_static/``, no build step) over a JSON API under ``/api/``.

=================================== ===================================================
``GET /api/session``                who asks: user, whether an admin, whether ACL is on
``GET /api/status``                 readiness, disk, flush, connections per protocol
``GET /api/topics``                 topics, their queues (min and max offsets), rates
                                    (``?queues=a,b``: only those topics' queues)
``GET /api/groups``                 consumer groups: members (every protocol), lag per queue
``GET /api/rates?minutes=N``        messages in and out per second, every 10 s sample
``GET /api/message?...``            a look-up: ``id`` (offset message id), ``topic`` and
                                    ``key``, or ``topic``, ``queue`` and ``offset``
``POST /api/topics``                create a topic (admins only)
``POST /api/groups/reset``          reset a group's offsets of a topic (admins only)
=================================== ===================================================

With ACL on, every API call carries an ACL user's keys as HTTP Basic credentials (the
page's login form; the page and its scripts are served to anyone: they hold no data). A
user sees the topics and groups its policies grant it anything on
(:meth:`~rmq_spark.broker.http.app.Viewer.sees`), and changes are for super users only
(403 for others). A POST must be JSON and carry the ``X-Rocketlite-Console`` header, which
a form or a page of another origin cannot send (no CORS here). A bad value is answered 400
naming it. Every response forbids inline scripts, framing and referrers.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import rmq_spark
from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.errors import codes_of
from rmq_spark.broker.core.key_query import NO_END_MS
from rmq_spark.broker.core.offset_reset import NOW, offsets_at_time
from rmq_spark.broker.http.app import NO_CHALLENGE_HEADER, HttpApp, Member, Run, Viewer
from rmq_spark.broker.http.console_data import (
    BadInput,
    body_preview,
    int_value,
    json_object,
    rate_series,
    reset_target,
    text_value,
)
from rmq_spark.broker.http.lag import group_lags
from rmq_spark.broker.http.server import HttpRequest, HttpResponse
from rmq_spark.clock import now_ms
from rmq_spark.codec.properties import KEYS, TAGS, UNIQ_KEY, decode_properties
from rmq_spark.codec.record import Record, decode_record, offset_msg_id, parse_offset_msg_id
from rmq_spark.errors import RocketliteError
from rmq_spark.names import check_manageable, validate_topic

__all__ = ["Console", "mount_console"]

log = logging.getLogger("rmq_spark.broker.http")

#: the page's files: name -> content type
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
SECURITY_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
]
#: records a look-up by key answers at most, and their bytes
MAX_KEY_RECORDS = 32
MAX_KEY_BYTES = 8 << 20
#: the rates window the chart may ask for, in minutes
MAX_RATE_MINUTES = 60
#: the window of the rates in the topic and group tables
RATE_WINDOW_S = 60.0
_LONG = 2**63 - 1


@cache
def _asset(name: str) -> bytes:
    return (resources.files("rmq_spark.broker.http") / "console_static" / name).read_bytes()


def _json(status: int, value: Any) -> HttpResponse:
    body = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    return HttpResponse(status, body, "application/json", list(SECURITY_HEADERS))


def _error(status: int, text: str) -> HttpResponse:
    return _json(status, {"error": text})


class Forbidden(Exception):
    """The user may not do this (403)."""


@dataclass(frozen=True)
class _Call:
    broker: Broker
    request: HttpRequest
    viewer: Viewer
    run: Run


class Console:
    """The console's answers; mounted at ``/`` of the HTTP port by :func:`mount_console`."""

    def __init__(self, app: HttpApp) -> None:
        self._app = app

    def public(self, request: HttpRequest) -> HttpResponse | None:
        """The page and its files, to anyone (they hold no data)."""
        if request.method not in ("GET", "HEAD"):
            return None
        name = "index.html" if request.path == "/" else request.path.lstrip("/")
        if name not in ASSETS:
            return None
        return HttpResponse(200, _asset(name), ASSETS[name], list(SECURITY_HEADERS))

    async def __call__(
        self, broker: Broker, request: HttpRequest, viewer: Viewer, run: Run
    ) -> HttpResponse:
        call = _Call(broker, request, viewer, run)
        route = (request.method if request.method != "HEAD" else "GET", request.path)
        handler = _ROUTES.get(route)
        if handler is None:
            if any(path == request.path for _, path in _ROUTES):
                return _error(405, f"{request.path} does not take {request.method}")
            return _error(404, f"nothing is served at {request.path!r}")
        try:
            if request.method == "POST":
                _check_post(request)
            return _json(200, await handler(self, call))
        except BadInput as exc:
            return _error(400, str(exc))
        except Forbidden as exc:
            return _error(403, str(exc))
        except RocketliteError as exc:
            return _error(_status_of(exc), str(exc))

    # -- reads ---------------------------------------------------------------------------

    async def session(self, call: _Call) -> dict:
        user = call.viewer.user
        return {
            "broker": call.broker.name,
            "version": rmq_spark.__version__,
            "acl": self._app.authorizer is not None,
            "user": None if user is None else user.name,
            "admin": call.viewer.is_admin,
        }

    async def status(self, call: _Call) -> dict:
        broker, viewer = call.broker, call.viewer
        storage = await call.run(broker.messaging.storage)
        ready, reason = self._app.readiness()
        flush = storage.flush_ms
        config = broker.messaging.store_config
        status: dict[str, Any] = {
            "broker": broker.name,
            "ready": ready,
            "reason": reason,
            "uptime_s": round(time.time() - broker.stats.started_s, 1),
            "disk": {
                "total_bytes": storage.disk_total_bytes,
                "free_bytes": storage.disk_free_bytes,
                "full": storage.disk_full,
            },
            "commitlog_bytes": storage.commitlog_bytes,
            "queues": storage.queues,
            "flush": {
                "mode": config.flush_mode,
                "behind_bytes": storage.flush_behind_bytes,
                "count": flush.count,
                "mean_ms": round(flush.total / flush.count, 3) if flush.count else 0.0,
                "max_ms": round(flush.maximum, 3),
            },
            "connections": self._app.connections(),
            "long_polls": broker.notifier.waiting(),
            "members": sum(
                len(broker.consumers.members(g))
                for g in broker.consumers.groups()
                if viewer.sees("", g)
            )
            + sum(1 for m in self._app.members() if viewer.sees("", m.group)),
        }
        if viewer.is_admin:
            totals = broker.stats.totals()
            rates = broker.rates
            status["in_per_s"] = round(rates.window(RATE_WINDOW_S, totals).tps, 3)
            status["out_per_s"] = round(rates.window(RATE_WINDOW_S, totals, out=True).tps, 3)
        return status

    async def topics(self, call: _Call) -> dict:
        # ?queues=a,b: only those topics' queues are listed (the page asks for the rows it
        # shows open); without it, every topic's
        wanted = None
        if "queues" in call.request.query:
            wanted = {name for name in call.request.param("queues").split(",") if name}
        return {"topics": await call.run(_topics, call.broker, call.viewer, wanted)}

    async def groups(self, call: _Call) -> dict:
        others = self._app.members()
        return {"groups": await call.run(_groups, call.broker, call.viewer, others)}

    async def rates(self, call: _Call) -> dict:
        minutes = int_value(call.request.param("minutes", "15"), "minutes", 1, MAX_RATE_MINUTES)
        rates = call.broker.rates
        samples = list(rates.recent)
        since = time.time() - minutes * 60 - rates.step_s
        # each name is asked about once, not once a sample
        topic_shown = cache(lambda topic: call.viewer.sees(topic))
        group_shown = cache(lambda group, topic: call.viewer.sees(topic, group))
        points = await call.run(rate_series, samples, since, topic_shown, group_shown)
        return {"step_s": rates.step_s, "points": points}

    async def message(self, call: _Call) -> dict:
        request, viewer, core = call.request, call.viewer, call.broker.messaging
        msg_id = request.param("id").strip()
        topic = request.param("topic").strip()
        key = request.param("key")
        queue = request.param("queue")
        if msg_id:
            try:
                host, physical = parse_offset_msg_id(msg_id)
            except RocketliteError as exc:
                raise BadInput(f"id: {exc}") from None
            try:
                record, _ = await call.run(core.find_record, physical, host)
            except RocketliteError:
                record = None
            # a message of a topic the user may not see is "not found", like a missing one
            if record is None or not viewer.sees(record.topic):
                return {"messages": [], "more": False}
            return {"messages": [_message_view(record)], "more": False}
        if not topic:
            raise BadInput("give id (an offset message id), or topic with key or queue+offset")
        topic = _topic_name(topic)
        if not viewer.sees(topic):
            raise Forbidden(f"user {_user(viewer)} may not see topic {topic!r}")
        if key:
            key = text_value(key, "key", max_chars=4096)
            found = await call.run(
                lambda: core.find_by_key(
                    topic, key, MAX_KEY_RECORDS, 0, NO_END_MS, max_bytes=MAX_KEY_BYTES
                )
            )
            records = [decode_record(raw) for raw in found.records]
            return {"messages": [_message_view(r) for r in records], "more": found.more}
        if not queue:
            raise BadInput("with topic, give key, or queue and offset")
        queue_id = int_value(queue, "queue", 0, 65535)
        offset = int_value(request.param("offset"), "offset", 0, _LONG)
        raw = await call.run(core.record_at_offset, topic, queue_id, offset)
        messages = [] if raw is None else [_message_view(decode_record(raw))]
        return {"messages": messages, "more": False}

    # -- changes (admins only) -------------------------------------------------------------

    async def create_topic(self, call: _Call) -> dict:
        _admin_only(call.viewer, "create topics")
        body = json_object(call.request.body)
        topic = _topic_name(text_value(body.get("topic"), "topic", max_chars=127))
        try:
            check_manageable(topic)
        except RocketliteError as exc:
            raise BadInput(str(exc)) from None
        default = call.broker.config.default_topic_queues
        queues = int_value(body.get("queues", default), "queues", 1, 1024)
        topics = call.broker.messaging.topics
        created = await call.run(lambda: topics.create(topic, queues))
        log.info("console: user %s created topic %s (%d queues)", _user(call.viewer), topic, queues)
        return {"topic": created.name, "queues": created.read_queue_nums}

    async def reset_group(self, call: _Call) -> dict:
        _admin_only(call.viewer, "reset offsets")
        body = json_object(call.request.body)
        group = text_value(body.get("group"), "group", max_chars=255)
        topic = _topic_name(text_value(body.get("topic"), "topic", max_chars=127))
        target = reset_target(body.get("to"))
        timestamp_ms = None
        if target == "time":
            timestamp_ms = int_value(body.get("timestamp_ms"), "timestamp_ms", 0, _LONG)
        table = await call.run(_reset, call.broker, group, topic, target, timestamp_ms)
        # running remoting consumers move to the new offsets (else they would commit their
        # old positions over them), as after mqadmin's reset
        told = self._app.tell_reset(group, topic, table, timestamp_ms or now_ms())
        log.info(
            "console: user %s reset group %s on topic %s to %s: %s; %d members told",
            _user(call.viewer),
            group,
            topic,
            target if timestamp_ms is None else f"time {timestamp_ms}",
            table,
            told,
        )
        return {
            "group": group,
            "topic": topic,
            "offsets": {str(q): o for q, o in table.items()},
            "members_told": told,
        }


_ROUTES = {
    ("GET", "/api/session"): Console.session,
    ("GET", "/api/status"): Console.status,
    ("GET", "/api/topics"): Console.topics,
    ("GET", "/api/groups"): Console.groups,
    ("GET", "/api/rates"): Console.rates,
    ("GET", "/api/message"): Console.message,
    ("POST", "/api/topics"): Console.create_topic,
    ("POST", "/api/groups/reset"): Console.reset_group,
}


def mount_console(app: HttpApp) -> Console:
    """Serve the console at ``/`` of ``app``."""
    console = Console(app)
    app.mount("", console, console.public)
    return console


def _check_post(request: HttpRequest) -> None:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise BadInput(f"a POST must be application/json, not {content_type or 'untyped'!r}")
    if request.headers.get(NO_CHALLENGE_HEADER) != "1":
        raise BadInput(f"a POST must carry the header {NO_CHALLENGE_HEADER}: 1")


def _admin_only(viewer: Viewer, what: str) -> None:
    if not viewer.is_admin:
        raise Forbidden(f"only super users may {what}; user {_user(viewer)} is not one")


def _user(viewer: Viewer) -> str:
    return "(anonymous)" if viewer.user is None else repr(viewer.user.name)


def _topic_name(text: str) -> str:
    try:
        return validate_topic(text, allow_system=True)
    except RocketliteError as exc:
        raise BadInput(f"topic: {exc}") from None


def _status_of(exc: RocketliteError) -> int:
    # RocketMQ 5's codes are HTTP's status times 100 (40400: 404), read from the one table
    return codes_of(exc).v2 // 100


def _topics(broker: Broker, viewer: Viewer, wanted: set[str] | None) -> list[dict]:
    core = broker.messaging
    totals = broker.stats.totals()
    rows = []
    for config in core.topics.list():
        if not viewer.sees(config.name):
            continue
        queues = []
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            low, high = core.queue_range(config.name, queue_id)
            queues.append({"queue": queue_id, "min": low, "max": high})
        rate = broker.rates.window(RATE_WINDOW_S, totals, key=config.name)
        rows.append(
            {
                "topic": config.name,
                "system": checks.is_system_topic(config.name),
                "read_queues": config.read_queue_nums,
                "write_queues": config.write_queue_nums,
                "perm": config.perm,
                "message_type": config.message_type,
                "messages": sum(q["max"] - q["min"] for q in queues),
                "in_total": totals.messages_in.get(config.name, (0, 0))[0],
                "in_per_s": round(rate.tps, 3),
                "queues": queues if wanted is None or config.name in wanted else None,
            }
        )
    return rows


def _groups(broker: Broker, viewer: Viewer, others: list[Member]) -> list[dict]:
    core, consumers = broker.messaging, broker.consumers
    with_offsets = {group for _, group in core.offsets.snapshot()}
    names = sorted({*consumers.groups(), *with_offsets, *(m.group for m in others)})
    names = [g for g in names if viewer.sees("", g)]
    shown = set(names)
    lags: dict[str, list[dict]] = {g: [] for g in names}
    taken = broker.stats.snapshot()
    now_ms = int(time.time() * 1000)
    for row in group_lags(
        core, taken.read_to, now_ms, lambda t, g: g in shown and viewer.sees(t, g)
    ):
        lags[row.group].append(
            {
                "topic": row.topic,
                "queue": row.queue_id,
                "committed": row.committed,
                "max": row.max_offset,
                "lag": row.lag,
                "lag_ms": row.lag_ms,
                "inflight": row.inflight,
                "ready": row.ready,
            }
        )
    totals = broker.stats.totals()
    rows = []
    for group in names:
        members = []
        for client_id in consumers.members(group):
            info = consumers.consumer_info(group, client_id)
            if info is None:
                continue
            members.append(
                {
                    "client_id": client_id,
                    "protocol": "",
                    "consume_type": info.consume_type,
                    "message_model": info.message_model,
                    "subscriptions": [
                        {"topic": t, "expression": e, "type": info.expression_type(t)}
                        for t, e in info.subscriptions
                        if viewer.sees(t)
                    ],
                }
            )
        for member in others:
            if member.group != group:
                continue
            members.append(
                {
                    "client_id": member.client_id,
                    "protocol": member.protocol,
                    "consume_type": member.consume_type,
                    "message_model": "CLUSTERING",
                    "subscriptions": [
                        {"topic": t, "expression": e, "type": kind}
                        for t, e, kind in member.subscriptions
                        if viewer.sees(t)
                    ],
                }
            )
        topics = sorted({row["topic"] for row in lags[group]})
        out = sum(
            broker.rates.window(RATE_WINDOW_S, totals, key=(group, t), out=True).messages
            for t in topics
        )
        rows.append(
            {
                "group": group,
                "members": members,
                "lag": sum(row["lag"] for row in lags[group]),
                "out_per_s": round(out / RATE_WINDOW_S, 3),
                "queues": lags[group],
            }
        )
    return rows


def _reset(
    broker: Broker, group: str, topic: str, target: str, timestamp_ms: int | None
) -> dict[int, int]:
    """Commit the offsets each readable queue of ``topic`` restarts at for ``group``: its
    min, or (as ``mqadmin resetOffsetByTime`` with force) its max or the first message
    stored at or after a time."""
    core = broker.messaging
    if target == "earliest":
        config = core.topics.get(topic)  # NotFoundError (404) naming it
        table = {q: core.min_offset(topic, q) for q in range(config.read_queue_nums)}
    else:
        when = NOW if target == "latest" or timestamp_ms is None else timestamp_ms
        table = offsets_at_time(core, group, topic, when, force=True)
    core.commit_offsets(group, topic, table, increase_only=False)
    return table


def _message_view(record: Record) -> dict:
    properties = decode_properties(record.properties)
    return {
        "topic": record.topic,
        "queue": record.queue_id,
        "queue_offset": record.queue_offset,
        "physical_offset": record.physical_offset,
        "msg_id": offset_msg_id(record.store_host, record.physical_offset),
        "unique_key": properties.get(UNIQ_KEY, ""),
        "tags": properties.get(TAGS, ""),
        "keys": properties.get(KEYS, ""),
        "born_ms": record.born_timestamp,
        "stored_ms": record.store_timestamp,
        "born_host": record.born_host,
        "store_host": record.store_host,
        "reconsume_times": record.reconsume_times,
        "sysflag": record.sysflag,
        "properties": dict(sorted(properties.items())),
        "body": body_preview(record.body, compressed=bool(record.sysflag & 1)),
    }
