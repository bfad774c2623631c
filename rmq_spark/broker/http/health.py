"""Whether the broker is alive and ready, as a load balancer or Kubernetes asks it
(``/healthz``, ``/readyz``, and the standard gRPC health service).

* **Alive** while the process answers at all: during recovery too (a probe that restarted
  a broker while it replays its commit log would never let it finish).
* **Ready** once recovery is done and the store takes writes: not while the store is being
  opened, not while the disk is too full to write, not after a failed write or fsync (the
  broker then stops: see the store's fail-stop), not while shutting down.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Phase", "Readiness", "readiness"]


class Phase(enum.Enum):
    OPENING = "opening"
    SERVING = "serving"
    STOPPING = "stopping"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str


def readiness(
    phase: Phase,
    *,
    failure: BaseException | None = None,
    disk_full: bool = False,
    free_bytes: int | None = None,
) -> Readiness:
    """The broker's readiness from its phase and its store's state.

    >>> readiness(Phase.OPENING)
    Readiness(ready=False, reason='opening the store: recovering from the commit log')
    >>> readiness(Phase.SERVING, disk_full=True, free_bytes=1024).ready
    False
    >>> readiness(Phase.SERVING)
    Readiness(ready=True, reason='ready')
    """
    if phase is Phase.OPENING:
        return Readiness(False, "opening the store: recovering from the commit log")
    if phase is Phase.STOPPING:
        return Readiness(False, "shutting down")
    if failure is not None:
        return Readiness(False, f"the store failed and takes no writes: {failure}")
    if disk_full:
        free = "" if free_bytes is None else f" ({free_bytes} bytes free)"
        return Readiness(False, f"the disk is full{free}: writes are refused until space is freed")
    return Readiness(True, "ready")
