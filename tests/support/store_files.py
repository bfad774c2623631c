"""What a store directory looks like on disk, to check that a reader changed nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path


def snapshot(root: Path, hash_up_to: int | None = 1 << 20) -> dict[str, tuple]:
    """(size, mtime, content digest) of every file and directory under ``root``; files over
    ``hash_up_to`` bytes are not hashed (None: every file is)."""
    state = {}
    for path in sorted(root.rglob("*")):
        info = path.stat()
        digest = None
        if path.is_file() and (hash_up_to is None or info.st_size <= hash_up_to):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        state[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns, digest)
    return state
