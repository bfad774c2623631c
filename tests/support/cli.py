"""Running the ``rocketlite`` command as a user does: ``python -m rmq_spark.cli ...``
processes, their exit code, stdout (tables and ``--json`` lines) and stderr checked.

A CLI process takes ~0.7 s to start (grpc, pyarrow), so :meth:`Cli.run_all` starts
independent commands as concurrent processes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

CLI = [sys.executable, "-m", "rmq_spark.cli"]
CLI_TIMEOUT_S = 60


@dataclass
class Run:
    """One finished CLI process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"rocketlite {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout:\n{self.stdout}--- stderr:\n{self.stderr}"
        )

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    def json_lines(self) -> list[dict]:
        """stdout as JSON Lines: every line must be one JSON object."""
        rows = [json.loads(line) for line in self.lines]
        assert all(isinstance(row, dict) for row in rows), self
        return rows

    def table(self) -> list[dict[str, str]]:
        """stdout as the CLI's aligned table (columns are 2+ spaces apart)."""
        header, *rows = self.lines
        names = re.split(r"\s{2,}", header.strip())
        return [
            dict(zip(names, re.split(r"\s{2,}", row.strip()), strict=True))
            for row in rows
            if row.strip() and not row.startswith("total lag:")
        ]

    def ok(self) -> Run:
        assert self.returncode == 0, self
        assert "Traceback" not in self.stderr, self
        return self

    def failed(self, *needles: str, code: int = 1, prefix: str = "error: ") -> Run:
        """A failure reported as exactly one stderr line starting with ``prefix`` that
        contains every needle, with exit ``code`` and nothing on stdout."""
        assert self.returncode == code, self
        assert "Traceback" not in self.stderr, self
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, self
        assert lines[0].startswith(prefix), self
        for needle in needles:
            assert needle in lines[0], f"{needle!r} not in the error line\n{self}"
        assert self.stdout == "", self
        return self


class Cli:
    """Runs ``rocketlite`` subcommands; ``--endpoints`` goes to every command but ``broker``
    unless the command names its own."""

    def __init__(self, endpoint: str | None = None) -> None:
        self.endpoint = endpoint

    def argv(self, args: Sequence[str]) -> list[str]:
        args = list(args)
        if self.endpoint and args[:1] != ["broker"] and "--endpoints" not in args:
            args += ["--endpoints", self.endpoint]
        return args

    def run(self, *args: str, stdin: str | None = None) -> Run:
        return self.run_all((list(args), stdin))[0]

    def run_all(self, *commands: Sequence[str] | tuple[Sequence[str], str | None]) -> list[Run]:
        """Start every command at once (a command is its args, or ``(args, stdin text)``),
        then collect them in order."""
        started = []
        for command in commands:
            if isinstance(command, tuple):
                args, stdin = command
            else:
                args, stdin = command, None
            argv = self.argv(args)
            process = subprocess.Popen(
                [*CLI, *argv],
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            started.append((argv, process, stdin))
        runs = []
        for argv, process, stdin in started:
            try:
                out, err = process.communicate(stdin, timeout=CLI_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
                pytest.fail(f"rocketlite {' '.join(argv)} ran over {CLI_TIMEOUT_S} s:\n{err}")
            runs.append(Run(argv, process.returncode, out, err))
        return runs
