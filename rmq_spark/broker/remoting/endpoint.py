"""How the remoting front-end serves one request code: decode it once, check it, serve it.

An :class:`Endpoint` names the steps, and the service runs them in this order for every
request:

1. the signature is verified (with ACL on) before anything else of the request is read;
2. ``decode`` reads the request into the values the broker will act on (a frozen value, or
   InvalidArgumentError / Refusal naming the bad field). Nothing reads the raw header
   fields after this;
3. ``resolve`` (optional, on a worker) adds what only the store knows and the check needs:
   the half message a transaction end names, say;
4. ``rule`` is authorized over that value: the check reads what the handler executes;
5. ``serve`` (a coroutine) or ``fast`` (a plain call that answers later by itself) acts on
   the value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmq_spark.auth.remoting_rules import SUPER, RemotingRule
from rmq_spark.wire.remoting.frame import Command

if TYPE_CHECKING:
    from rmq_spark.broker.remoting.server import Connection

Serve = Callable[["Connection", Command, Any], Awaitable[Command | None]]


def no_value(request: Command) -> None:
    """The decoder of a request that carries nothing the broker acts on."""
    return None


@dataclass(frozen=True)
class Endpoint:
    serve: Serve | None = None
    rule: RemotingRule = SUPER
    decode: Callable[[Command], Any] = no_value
    #: blocking: run on a worker between decode and the check
    resolve: Callable[[Any], Any] | None = None
    #: served without a task of its own (sends): it answers when done
    fast: Callable[[Connection, Command, Any], None] | None = None

    def __post_init__(self) -> None:
        if (self.serve is None) == (self.fast is None):
            raise ValueError("an endpoint has exactly one of serve and fast")
        if self.fast is not None and self.resolve is not None:
            raise ValueError("a fast endpoint cannot resolve on a worker first")
