"""``tests/java/RemotingProbe.java``, Apache RocketMQ 4.9's own Java client and ``mqadmin``,
compiled and run against a broker's remoting port.

It needs a build of Apache RocketMQ 4.9 (its ``lib/`` of jars) named by ``ROCKETMQ_HOME``
and a JDK (``javac``): tests that use it carry :data:`NEEDS_JAVA`, which skips them with the
reason otherwise. The ``java`` fixture of ``tests/integration/conftest.py`` compiles it once
per module with :func:`compile_probe`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.rocketmq_harness import ROCKETMQ_HOME, available

PROBE = Path(__file__).resolve().parents[1] / "java" / "RemotingProbe.java"
JVM_FLAGS = [
    "-Xmx256m",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
]
#: why the probe cannot run here, or None
MISSING = (
    "needs Apache RocketMQ 4.9's jars: set ROCKETMQ_HOME to a build with lib/ (see the "
    "README, 'Testing against Apache RocketMQ')"
    if not available()
    else "needs a JDK (javac)"
    if shutil.which("javac") is None
    else None
)
#: the mark of a test that runs the probe: skipped, saying why, where it cannot run
NEEDS_JAVA = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def compile_probe(work: Path, probe: Path = PROBE) -> Callable[..., list[str]]:
    """Compile RemotingProbe (or another ``probe`` of ``tests/java/``) into ``work``;
    returns ``java(*args, timeout_s=...) -> stdout lines`` running it to its ``DONE``, with
    ``java.start(*args) -> Popen`` (stdout piped, text) and ``java.mqadmin(*args) ->
    output``."""
    classes = work / "classes"
    lib = f"{ROCKETMQ_HOME}/lib/*"
    main = probe.stem
    subprocess.run(
        ["javac", "-nowarn", "-cp", lib, "-d", str(classes), str(probe)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    logs = work / "logs"
    logback = work / "logback.xml"
    logback.write_text(
        '<configuration><appender name="F" class="ch.qos.logback.core.FileAppender">'
        f"<file>{logs}/client.log</file><encoder><pattern>%d %p %c - %m%n</pattern></encoder>"
        '</appender><root level="WARN"><appender-ref ref="F"/></root></configuration>'
    )
    command = [
        "java",
        *JVM_FLAGS,
        f"-Drocketmq.client.logRoot={logs}",
        f"-Dlogback.configurationFile={logback}",
        "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener",
        "-cp",
        f"{lib}:{classes}",
    ]

    def run(*args: str, timeout_s: float = 90, env: dict | None = None) -> list[str]:
        done = subprocess.run(
            [*command, main, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **(env or {})},
        )
        lines = done.stdout.splitlines()
        assert "DONE" in lines, f"{main} {args} failed:\n{done.stdout}\n{done.stderr}"
        return lines

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([*command, main, *args], stdout=subprocess.PIPE, text=True)

    def mqadmin(*args: str, timeout_s: float = 60) -> str:
        done = subprocess.run(
            [*command, "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "ROCKETMQ_HOME": ROCKETMQ_HOME},
        )
        return done.stdout + done.stderr

    run.start = start  # type: ignore[attr-defined]
    run.mqadmin = mqadmin  # type: ignore[attr-defined]
    return run
