"""Apache RocketMQ's own servers for the benchmarks that compare with them: a name server
and one broker from the build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars; the logback
configs of ``conf/`` when there), started on free 127.0.0.1 ports with their logs under a
work directory, not ``~``. (RocketMQ 4.9 has no bind-address setting: its servers listen on
the wildcard address; everything here connects to them through 127.0.0.1.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _common import stop_process

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
START_TIMEOUT_S = 90  # Apache name server and broker: until their ports accept connections
SETTLE_S = 2  # ... and this much longer (the broker registers with the name server)
JVM_STOP_S = 10  # SIGTERM/SIGINT, then SIGKILL after this long
JVM_OPENS = [
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports",
    "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
]
NAMESRV_JVM = ["-Xms256m", "-Xmx256m", *JVM_OPENS]
BROKER_JVM = ["-Xms1g", "-Xmx1g", "-XX:MaxDirectMemorySize=2g", "-XX:+UseG1GC", *JVM_OPENS]
CLIENT_JVM = [
    "-Xms512m",
    "-Xmx512m",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.lang=ALL-UNNAMED",
]

#: used when ROCKETMQ_HOME has no conf/logback_<name>.xml: everything to one file
FALLBACK_LOGBACK = (
    '<configuration><appender name="F" class="ch.qos.logback.core.FileAppender">'
    "<file>{logs}/{name}.log</file><encoder><pattern>%d %p %t - %m%n</pattern></encoder>"
    '</appender><root level="INFO"><appender-ref ref="F"/></root></configuration>'
)


# -- processes ---------------------------------------------------------------------------


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(avoid: set[int], neighbours: tuple[int, ...] = ()) -> int:
    """A free 127.0.0.1 port not in ``avoid`` whose ``port + d`` for each d in
    ``neighbours`` are free (and not in ``avoid``) too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        others = {port + d for d in neighbours} - {port}
        wanted = others | {port}
        in_range = min(wanted) > 1024 and max(wanted) < 65536
        if in_range and not wanted & avoid and all(port_is_free(p) for p in others):
            return port
    raise SystemExit("no free ports found on 127.0.0.1")


def wait_for_port(port: int, process: subprocess.Popen, name: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited ({process.returncode}); log:\n{tail(log)}")
        with socket.socket() as sock:
            sock.settimeout(1)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"{name} did not listen on 127.0.0.1:{port} in {START_TIMEOUT_S} s")


def tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


@dataclass
class Java:
    """How to run classes of an Apache RocketMQ build: ``rocketmq_home/lib/*`` on the class
    path, ``user.home`` and the servers' ``ROCKETMQ_HOME`` (log configs) under ``work``."""

    rocketmq_home: Path
    work: Path
    home: Path = field(init=False)  # user.home of every JVM; ROCKETMQ_HOME of the servers

    def __post_init__(self) -> None:
        self.home = self.work / "java-home"
        (self.home / "conf").mkdir(parents=True)
        for name in ("namesrv", "broker"):
            source = self.rocketmq_home / "conf" / f"logback_{name}.xml"
            text = (
                source.read_text()
                if source.is_file()
                else FALLBACK_LOGBACK.format(logs="${user.home}/logs", name=name)
            )
            target = self.home / "conf" / f"logback_{name}.xml"
            target.write_text(text.replace("${user.home}", str(self.home)))

    def argv(self, jvm: list[str], main: str, *args: str) -> list[str]:
        classpath = str(self.rocketmq_home / "lib" / "*")
        return ["java", *jvm, f"-Duser.home={self.home}", "-cp", classpath, main, *args]

    def start_server(
        self, name: str, jvm: list[str], main: str, conf: dict[str, object]
    ) -> tuple[subprocess.Popen, Path]:
        """Start ``main -c NAME.conf`` with ``conf``; stdout and stderr to ``NAME.out``."""
        conf_path = self.work / f"{name}.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        log = self.work / f"{name}.out"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                self.argv(jvm, main, "-c", str(conf_path)),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.work,
                env={**os.environ, "ROCKETMQ_HOME": str(self.home)},
            )
        return process, log


class ApacheRocketMQ:
    """An Apache RocketMQ name server and one broker (broker-a, ASYNC_MASTER) on
    127.0.0.1 ports, stores and logs under ``java.work``."""

    def __init__(
        self, java: Java, store: Path | None = None, conf: dict[str, object] | None = None
    ) -> None:
        self.java = java
        #: the broker's store directory (default: a new one under the work directory)
        self.store = store or java.work / "apache-store"
        #: broker settings over the defaults below
        self.conf = conf or {}
        self.processes: list[subprocess.Popen] = []
        self.namesrv_port = 0
        self.broker_port = 0

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def start(self) -> ApacheRocketMQ:
        ns_port = free_port(set())
        # the broker also listens on listenPort - 2 (VIP channel) and listenPort + 1 (HA)
        broker_port = free_port({ns_port}, neighbours=(-2, 1))
        store = self.store
        namesrv, ns_log = self.java.start_server(
            "namesrv", NAMESRV_JVM, NAMESRV_MAIN, {"listenPort": ns_port}
        )
        self.processes.append(namesrv)
        broker, broker_log = self.java.start_server(
            "broker",
            BROKER_JVM,
            BROKER_MAIN,
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "brokerId": 0,
                "brokerRole": "ASYNC_MASTER",
                "flushDiskType": "ASYNC_FLUSH",
                "namesrvAddr": f"127.0.0.1:{ns_port}",
                "brokerIP1": "127.0.0.1",
                "listenPort": broker_port,
                "storePathRootDir": store,
                "storePathCommitLog": store / "commitlog",
                "autoCreateTopicEnable": "true",
                "mappedFileSizeCommitLog": 128 << 20,
                "diskMaxUsedSpaceRatio": 95,
                **self.conf,
            },
        )
        self.processes.append(broker)
        wait_for_port(ns_port, namesrv, "Apache RocketMQ name server", ns_log)
        wait_for_port(broker_port, broker, "Apache RocketMQ broker", broker_log)
        time.sleep(SETTLE_S)
        servers = ((namesrv, "name server", ns_log), (broker, "broker", broker_log))
        for process, name, log in servers:
            if process.poll() is not None:
                raise SystemExit(f"Apache RocketMQ {name} exited; log:\n{tail(log)}")
        self.namesrv_port = ns_port
        self.broker_port = broker_port
        return self

    @property
    def broker_pid(self) -> int:
        """The broker's process id (after :meth:`start`)."""
        return self.processes[1].pid

    def stop(self) -> None:
        for process in reversed(self.processes):  # the broker first
            stop_process(process, JVM_STOP_S)
        self.processes.clear()


def create_topic(name_server: str, broker: str, topic: str, queues: int) -> None:
    """UPDATE_AND_CREATE_TOPIC on Apache's ``broker`` (``queues`` read and write queues),
    then wait until ``name_server`` routes every one of them."""
    from rmq_spark.client.remoting import RemotingClient, RemotingConnection
    from rmq_spark.client.remoting.transport import raise_for
    from rmq_spark.errors import NotFoundError
    from rmq_spark.wire.remoting.codes import RequestCode
    from rmq_spark.wire.remoting.frame import Command

    conn = RemotingConnection(broker)
    try:
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        answer = conn.call(Command(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), 10.0)
        raise_for(answer, f"creating {topic}")
    finally:
        conn.close()
    with RemotingClient(name_server) as client:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(NotFoundError):
                route = client.route(topic)
                if len(route.readable) == len(route.writable) == queues:
                    return
            if time.monotonic() > deadline:
                raise SystemExit(f"topic {topic} did not reach the name server's route")
            time.sleep(0.5)


def rocketmq_home() -> Path | None:
    home = os.environ.get("ROCKETMQ_HOME", "")
    return Path(home) if home and (Path(home) / "lib").is_dir() else None


def describe_build(home: Path) -> str:
    jars = sorted(p.name for p in (home / "lib").glob("rocketmq-*.jar"))
    return ", ".join(jars[:3]) + (" ..." if len(jars) > 3 else "") or "no rocketmq-*.jar"


def java_version() -> str:
    done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else "java (version unknown)"


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM raises SystemExit and SIGINT KeyboardInterrupt, so that the clean-up runs for
    both. SIGINT is handled even when this process started with it ignored (as a shell
    starts background jobs, e.g. ``./dev bench --quick``): the benchmark producer inherits
    what this process does with SIGINT, and is stopped with it."""

    def on_sigterm(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous_term = signal.signal(signal.SIGTERM, on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)
