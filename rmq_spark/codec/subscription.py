"""Tag subscription expressions: ``*`` (everything) or ``TagA || TagB``.

Brokers filter on the consume queue by tag hash code; clients re-check the real tag string
because different tags can share a hash code.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import InvalidArgumentError, shown

MATCH_ALL = "*"
_SEPARATOR = "||"


@dataclass(frozen=True)
class Subscription:
    """A parsed expression. ``tags`` is None when every message matches.

    >>> sorted(parse_subscription("TagA || TagB").tags)
    ['TagA', 'TagB']
    >>> parse_subscription("*").matches("anything")
    True
    """

    expression: str
    tags: frozenset[str] | None

    @property
    def tag_codes(self) -> list[int] | None:
        """Hash codes for the consume-queue filter; None means no filtering."""
        return None if self.tags is None else sorted({tag_hash_code(t) for t in self.tags})

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


def parse_subscription(expression: str | None) -> Subscription:
    """Parse ``*``, empty (same as ``*``) or tags joined by ``||``; whitespace is ignored."""
    text = (expression or "").strip()
    if text in ("", MATCH_ALL):
        return Subscription(MATCH_ALL, None)
    tags = [part.strip() for part in text.split(_SEPARATOR)]
    bad = [t for t in tags if not t or "|" in t or t == MATCH_ALL]
    if bad:
        raise InvalidArgumentError(
            f"subscription expression {shown(expression)} is not '*' or tags joined by '||' "
            "(e.g. 'TagA || TagB')"
        )
    return Subscription(" || ".join(tags), frozenset(tags))
