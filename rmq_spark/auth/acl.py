"""ACL 2.0 model and evaluation (pure: no I/O, no gRPC).

A user has a secret, a type (``Super`` users skip authorization) and a status (``disable``
refuses every call). Each normal user's ACL is a list of policy entries: a resource
pattern, actions, optional source networks and a decision.

Evaluation of one request (a resource, the actions any of which suffices, the caller's IP):
entries whose pattern matches the resource, whose actions cover the request and whose
source networks hold the caller are candidates; the most specific pattern wins (a typed
pattern over ``*``, a literal name over a prefix over ``Topic:*``, a longer prefix over a
shorter one); at equal specificity Deny wins over Allow. No candidate: denied.

Group names are compared with ``%RETRY%`` / ``%DLQ%`` removed, and a topic named
``%RETRY%G`` or ``%DLQ%G`` is checked as the group ``G`` (RocketMQ's rule).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class Action(enum.Enum):
    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"

    @classmethod
    def parse(cls, text: str) -> Action:
        for action in cls:
            if action.value.lower() == str(text).strip().lower():
                return action
        names = ", ".join(a.value for a in cls)
        raise ValueError(f"action {text!r} is not one of {names}")


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"

    @classmethod
    def parse(cls, text: str) -> Decision:
        for decision in cls:
            if decision.value.lower() == str(text).strip().lower():
                return decision
        raise ValueError(f"decision {text!r} must be Allow or Deny")


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


TOPIC = "Topic"
GROUP = "Group"
_TYPES = (TOPIC, GROUP)


def group_base(name: str) -> str:
    """A group name without its ``%RETRY%`` / ``%DLQ%`` prefix."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


@dataclass(frozen=True)
class Resource:
    """What a request touches: ``Resource(TOPIC, "orders")``; name ``*`` = every one of
    the type (ListTopics)."""

    type: str
    name: str

    @classmethod
    def topic(cls, name: str) -> Resource:
        if name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            return cls(GROUP, group_base(name))
        return cls(TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(GROUP, group_base(name))

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


@dataclass(frozen=True)
class Pattern:
    """A policy resource: ``*``, ``Topic:name``, ``Topic:prefix*`` or ``Topic:*`` (and
    ``Group:...``)."""

    type: str | None  # None = any type
    name: str  # literal name, or the prefix when ``prefix``
    prefix: bool = False

    @classmethod
    def parse(cls, text: str) -> Pattern:
        text = str(text).strip()
        if text == "*":
            return cls(None, "", prefix=True)
        rtype, colon, name = text.partition(":")
        rtype = rtype.strip().capitalize()
        if not colon or rtype not in _TYPES or not name:
            raise ValueError(
                f"resource {text!r} must be *, Topic:NAME, Topic:PREFIX*, Topic:*, "
                "Group:NAME, Group:PREFIX* or Group:*"
            )
        if "*" in name[:-1]:
            raise ValueError(f"resource {text!r}: '*' may only end the name")
        if name.endswith("*"):
            base = name[:-1]
            return cls(rtype, group_base(base) if rtype == GROUP else base, prefix=True)
        return cls(rtype, group_base(name) if rtype == GROUP else name)

    def matches(self, resource: Resource) -> bool:
        if self.type is not None and self.type != resource.type:
            return False
        if resource.name == "*":  # a request about every resource of the type
            return self.prefix and self.name == ""
        if self.prefix:
            return resource.name.startswith(self.name)
        return resource.name == self.name

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Larger is more specific: typed, then literal > prefix > any, then prefix length."""
        if self.type is None:
            return (0, 0, 0)
        if not self.prefix:
            return (1, 2, len(self.name))
        return (1, 1 if self.name else 0, len(self.name))

    def __str__(self) -> str:
        if self.type is None:
            return "*"
        return f"{self.type}:{self.name}{'*' if self.prefix else ''}"


@dataclass(frozen=True)
class Entry:
    """One policy entry."""

    pattern: Pattern
    actions: frozenset[Action]
    decision: Decision
    #: empty = from anywhere
    source_ips: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    #: where it came from, for messages ("acls[0].policies[0].entries[2]")
    where: str = ""

    def covers(self, wanted: frozenset[Action]) -> bool:
        if not self.actions:
            return False
        if Action.ANY in wanted or Action.ALL in self.actions:
            return True
        return bool(self.actions & wanted)

    def from_source(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        if not self.source_ips:
            return True
        if ip is None:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip.version == net.version and ip in net for net in self.source_ips)


def parse_networks(items: Iterable[str]) -> tuple:
    nets = []
    for item in items:
        try:
            nets.append(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError:
            raise ValueError(f"source IP {item!r} is not an address or network") from None
    return tuple(nets)


@dataclass(frozen=True)
class User:
    name: str
    secret: str = field(repr=False)
    type: UserType = UserType.NORMAL
    enabled: bool = True

    @property
    def is_super(self) -> bool:
        return self.type is UserType.SUPER


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str
    entry: Entry | None = None


def evaluate(
    entries: Sequence[Entry],
    resource: Resource,
    actions: Iterable[Action],
    source_ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None,
) -> Verdict:
    """The decision of ``entries`` for ``resource``; any of ``actions`` suffices."""
    wanted = frozenset(actions)
    best: Entry | None = None
    for entry in entries:
        if not (
            entry.pattern.matches(resource)
            and entry.covers(wanted)
            and entry.from_source(source_ip)
        ):
            continue
        if best is None or _ranks_above(entry, best):
            best = entry
    shown = "|".join(sorted(a.value for a in wanted))
    if best is None:
        return Verdict(False, f"no policy grants {shown} on {resource}")
    if best.decision is Decision.DENY:
        return Verdict(False, f"{shown} on {resource} is denied by {best.pattern}", best)
    return Verdict(True, f"{shown} on {resource} allowed by {best.pattern}", best)


def _ranks_above(entry: Entry, other: Entry) -> bool:
    if entry.pattern.specificity != other.pattern.specificity:
        return entry.pattern.specificity > other.pattern.specificity
    return entry.decision is Decision.DENY and other.decision is Decision.ALLOW


@dataclass(frozen=True)
class AccessControl:
    """The users and their entries: what one ACL file says."""

    users: Mapping[str, User]
    entries: Mapping[str, tuple[Entry, ...]]
    #: freshness window of signed requests (None = no check)
    replay_window_s: float | None = 15 * 60

    def user(self, name: str) -> User | None:
        return self.users.get(name)

    def secret_of(self, name: str) -> str | None:
        user = self.users.get(name)
        return None if user is None else user.secret

    def authorize(
        self,
        user: User,
        resource: Resource,
        actions: Iterable[Action],
        source_ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None,
    ) -> Verdict:
        if user.is_super:
            return Verdict(True, "super user")
        return evaluate(self.entries.get(user.name, ()), resource, actions, source_ip)
