"""A real small disk for tests: a tmpfs of a given size, mounted in a user and mount
namespace (no privileges needed where unprivileged user namespaces are allowed), held by a
sleeping process and reached from outside through ``/proc/<pid>/root``. Tests that need one
skip, saying why, where that is not possible.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
from pathlib import Path

import pytest


class SmallFilesystem:
    """A tmpfs of ``size`` bytes at ``path``, in a namespace of its own."""

    def __init__(self, mount_point: Path, size: int) -> None:
        mount_point.mkdir()
        script = 'mount -t tmpfs -o size="$1" tmpfs "$2" && echo mounted && exec sleep 3600'
        argv = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
        try:
            self.holder = subprocess.Popen(
                [*argv, "sh", "-c", script, "sh", str(size), str(mount_point)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except FileNotFoundError:
            pytest.skip("needs unshare (util-linux) to mount a small tmpfs")
        line = self.holder.stdout.readline()
        if line.strip() != b"mounted":
            error = self.holder.stderr.read().decode(errors="replace").strip()
            self.holder.wait()
            pytest.skip(f"cannot mount a tmpfs in a user namespace here: {error}")
        self.path = Path(f"/proc/{self.holder.pid}/root") / mount_point.relative_to("/")
        self.filler = self.path / "filler"

    def fill(self) -> None:
        """Write a file until the disk refuses more."""
        chunk = b"\0" * (1 << 20)  # the last write is short, the one after it fails
        with open(self.filler, "ab", buffering=0) as out:
            try:
                while True:
                    out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        assert shutil.disk_usage(self.path).free < 8192

    def free(self) -> None:
        self.filler.unlink()

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()
