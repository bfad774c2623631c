"""The broker's side of short-circuit reads (:mod:`rmq_spark.wire.short_circuit`).

A Unix domain socket, by default ``<temp dir>/rocketlite-<port>.sock`` (the broker's gRPC
port). Any local user may connect, as any local user may reach the broker's port: what
protects the data is the same check a pull gets. Each request is checked as a
``PullMessages`` of that queue and group would be (the same ACL rule, the same signature,
when access control is on), and answered with the files holding the range, opened
read-only here and passed as file descriptors. The reader never gets write access, nor a
file it did not ask for, nor a path it could open itself. A commit-log segment holds the
records of every topic, though, so with access control only super users get files; any
other user allowed the pull is answered PULL_INSTEAD, and its client pulls.

Requests are rare (one per queue range of a Spark task) and cheap, so one thread accepts
and a thread per connection answers; none of it touches the event loop.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    RocketliteError,
    UnauthenticatedError,
)
from rmq_spark.log_limit import LogLimiter, brief
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, messaging_pb2
from rmq_spark.wire.short_circuit import (
    MAX_FDS,
    VERSION,
    WireError,
    range_answer,
    recv_message,
    send_message,
)

if TYPE_CHECKING:
    from rmq_spark.auth.interceptor import Authorizer
    from rmq_spark.broker.core.broker import Broker

log = logging.getLogger("rmq_spark.broker")

_PULL = "/rocketlite.v1.MessagingService/PullMessages"
#: a reader on this host: what the ACL's IP rules see for a Unix-socket caller
_LOCAL_PEER = "ipv4:127.0.0.1:0"


def default_socket_path(port: int) -> Path:
    """Where a broker on ``port`` listens for short-circuit readers unless told."""
    return Path(tempfile.gettempdir()) / f"rocketlite-{port}.sock"


class ShortCircuitServer:
    """Serves short-circuit requests for ``broker`` on ``path``; ``authorizer`` is the
    broker's ACL authorizer, or None when access control is off."""

    def __init__(
        self, broker: Broker, path: Path, authorizer: Authorizer | None = None, mode: int = 0o666
    ) -> None:
        self.broker = broker
        self.path = Path(path)
        self._authorizer = authorizer
        self._log_limit = LogLimiter(log)
        self._stop = threading.Event()
        if self.path.exists() or self.path.is_symlink():
            _remove_stale(self.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(self.path))
            os.chmod(self.path, mode)
            self._sock.listen(64)
        except OSError:
            self._sock.close()
            raise
        self._thread = threading.Thread(target=self._accept, name="rmq-short-circuit", daemon=True)

    def start(self) -> ShortCircuitServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread.ident is not None:  # stop() may come before start() (a signal)
            self._thread.join(5)
        try:
            self.path.unlink()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                try:
                    request, stray = recv_message(conn)
                except (WireError, OSError, ValueError, RecursionError):
                    return  # gone, or bytes that are no message (JSON nested too deep too)
                for fd in stray:
                    os.close(fd)
                answer, fds = self._answer(request)
                try:
                    send_message(conn, answer, fds)
                except (OSError, WireError):
                    return
                finally:
                    for fd in fds:
                        os.close(fd)

    def _answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        try:
            return self._files_for(request)
        except PermissionDeniedError as exc:
            return _refusal("PERMISSION_DENIED", exc), []
        except PullInstead as exc:
            return _refusal("PULL_INSTEAD", exc), []
        except NotFoundError as exc:
            return _refusal("NOT_FOUND", exc), []
        except (InvalidArgumentError, KeyError, TypeError, ValueError, OverflowError) as exc:
            return _refusal("INVALID", exc), []  # OverflowError: a number given as Infinity
        except UnauthenticatedError as exc:
            return _refusal("UNAUTHENTICATED", exc), []
        except (RocketliteError, OSError) as exc:
            self._log_limit.warning(
                type(exc).__name__, "short-circuit request failed: %s", brief(str(exc))
            )
            return _refusal("ERROR", exc), []
        except Exception as exc:  # a bug: one line, no traceback (a client's input caused it)
            self._log_limit.error(
                type(exc).__name__,
                "short-circuit request failed: internal error %s: %s",
                type(exc).__name__,
                brief(str(exc)),
            )
            log.debug("the internal error's traceback", exc_info=exc)
            return _refusal_text("ERROR", f"internal broker error: {type(exc).__name__}"), []

    def _files_for(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        if request.get("version") != VERSION:
            raise InvalidArgumentError(
                f"protocol version {request.get('version')!r} is not {VERSION}"
            )
        if request.get("broker") != self.broker.name:
            return _refusal_text("WRONG_BROKER", f"this is broker {self.broker.name!r}"), []
        topic, queue_id = str(request["topic"]), int(request["queueId"])
        start, end = int(request["start"]), int(request["end"])
        group = request.get("group")
        self._check_access(request, topic, queue_id, group)
        found = self.broker.messaging.range_files(topic, queue_id, start, end, MAX_FDS)
        answer, fds = range_answer(self.broker.name, found)
        self.broker.short_circuit_reads += 1
        return answer, fds

    def _check_access(
        self, request: dict[str, Any], topic: str, queue_id: int, group: str | None
    ) -> None:
        """The rule of a pull of this queue by this group, checked before anything of the
        store is looked at (a caller refused learns nothing of it); readable topic and
        broker. With access control, files only for a super user: a commit-log segment
        holds every topic's records (the broker's own included), and whoever holds its
        descriptor may read all of them, those written after this check too; anyone else
        is told to pull (:class:`PullInstead`)."""
        if self._authorizer is not None:
            from rmq_spark.auth.permissions import rule_for

            pull = messaging_pb2.PullMessagesRequest(
                queue=common_pb2.MessageQueue(
                    topic=topic, broker_name=self.broker.name, queue_id=queue_id
                ),
                consumer_group=group or "",
            )
            metadata = [(str(k), str(v)) for k, v in request.get("auth") or ()]
            rule = rule_for(_PULL)
            # refusals are UnauthenticatedError or PermissionDeniedError (see _answer)
            user = self._authorizer.authenticate(metadata)
            needs = rule.needs(pull) if rule is not None and rule.needs is not None else ()
            self._authorizer.authorize(user, rule, needs, _LOCAL_PEER)
            if not user.is_super:
                raise PullInstead(
                    f"user {user.name} may read {topic!r} by pulls only: the files of a "
                    "short-circuit read hold every topic's records, so with access control "
                    "the broker hands them to super users only"
                )
        config = self.broker.messaging.topics.find(topic)
        if config is None:
            raise NotFoundError(f"topic {topic!r} does not exist")
        if not config.perm & 4 or not self.broker.config.broker_perm & 4:
            raise PermissionDeniedError(f"topic {topic!r} is not readable on this broker")


class PullInstead(Exception):
    """The caller may read the range, by pulls: answered with a code the client takes as
    "read through the broker instead"."""


def _refusal(code: str, exc: BaseException) -> dict[str, Any]:
    return _refusal_text(code, brief(str(exc), 1000))


def _refusal_text(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "message": message}


def _remove_stale(path: Path) -> None:
    """A socket file left by a broker that died: remove it, unless one still answers."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise InvalidArgumentError(
        f"short-circuit socket {path} is in use by another broker; give this one another "
        "path (--short-circuit-socket) or stop the other"
    )
