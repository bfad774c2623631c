"""Apache RocketMQ itself for the tests that compare against it: a name server and one broker
(``broker-a`` of ``DefaultCluster``) on free loopback ports with a temporary store, started
from a build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars and ``conf/``), and the Java
command line to run its tools and clients with."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.eventually import eventually

ROCKETMQ_HOME = os.environ.get("ROCKETMQ_HOME", "")
OPENS = [
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
START_TIMEOUT_S = 90


def available() -> bool:
    return bool(ROCKETMQ_HOME) and (Path(ROCKETMQ_HOME) / "lib").is_dir()


needs_rocketmq = pytest.mark.skipif(
    not available(),
    reason="needs Apache RocketMQ 4.9's jars: set ROCKETMQ_HOME to a build with lib/ "
    "(see the README, 'Testing against Apache RocketMQ')",
)


def java_command(root: Path, heap: str = "512m") -> list[str]:
    """``java`` with the flags RocketMQ 4.9 needs on JDK 17, its jars, logs under ``root``."""
    return [
        "java",
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *OPENS,
        f"-Drocketmq.client.logRoot={root / 'logs'}",
        "-cp",
        f"{ROCKETMQ_HOME}/lib/*",
    ]


def _free_port(spacing: int = 0) -> int:
    """A free port whose neighbours down to -spacing and up to +1 are free too (RocketMQ's
    broker also listens on port-2 and port+1)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port - spacing < 1024:
            continue
        if all(_is_free(p) for p in range(port - spacing, port + 2)):
            return port
    raise RuntimeError("no free port range found")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_port(port: int, process: subprocess.Popen, log: Path) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            pytest.fail(f"RocketMQ exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    eventually(
        listening, what=f"RocketMQ to listen on {port}", timeout=START_TIMEOUT_S, interval=0.5
    )


def _wait_registered(name_server: str) -> None:
    """Until the name server routes TBW102 (the topic a broker with autoCreateTopicEnable
    registers): the broker has registered."""
    from rmq_spark.client.remoting import RemotingClient
    from rmq_spark.errors import NotFoundError

    with RemotingClient(name_server) as client:

        def routed() -> list:
            try:
                return client.route("TBW102").writable
            except NotFoundError as missing:
                raise AssertionError(str(missing)) from None

        eventually(routed, what="the broker to register with the name server", interval=0.2)


class RocketMQCluster:
    """``name_server`` is the address clients use; ``stop()`` ends both processes.

    The broker's store is ``root/store`` unless ``store`` names another directory (e.g. one
    rocketlite wrote); ``settings`` are extra ``broker.conf`` lines."""

    def __init__(
        self, root: Path, store: Path | None = None, settings: tuple[str, ...] = ()
    ) -> None:
        self.root = root
        self.store = store if store is not None else root / "store"
        self.settings = settings
        self.home = root / "home"
        (self.home / "conf").mkdir(parents=True)
        for conf in (Path(ROCKETMQ_HOME) / "conf").glob("logback_*.xml"):
            text = conf.read_text().replace("${user.home}", str(root))
            (self.home / "conf" / conf.name).write_text(text)
        self.namesrv_port = _free_port()
        self.broker_port = _free_port(spacing=2)
        self.name_server = f"127.0.0.1:{self.namesrv_port}"
        self.broker_address = f"127.0.0.1:{self.broker_port}"
        self._processes: list[subprocess.Popen] = []

    def start(self) -> RocketMQCluster:
        env = {**os.environ, "ROCKETMQ_HOME": str(self.home)}
        (self.root / "namesrv.conf").write_text(f"listenPort={self.namesrv_port}\n")
        store = self.store
        (self.root / "broker.conf").write_text(
            "\n".join(
                [
                    "brokerClusterName=DefaultCluster",
                    "brokerName=broker-a",
                    "brokerId=0",
                    "brokerRole=ASYNC_MASTER",
                    "flushDiskType=ASYNC_FLUSH",
                    f"namesrvAddr={self.name_server}",
                    "brokerIP1=127.0.0.1",
                    f"listenPort={self.broker_port}",
                    f"storePathRootDir={store}",
                    f"storePathCommitLog={store / 'commitlog'}",
                    "autoCreateTopicEnable=true",
                    "mappedFileSizeCommitLog=16777216",
                    "diskMaxUsedSpaceRatio=98",
                    *self.settings,
                ]
            )
            + "\n"
        )
        for name, main, conf, heap, port in (
            ("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "namesrv.conf", "256m",
             self.namesrv_port),
            ("broker", "org.apache.rocketmq.broker.BrokerStartup", "broker.conf", "1g",
             self.broker_port),
        ):  # fmt: skip
            log = self.root / f"{name}.out"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    [*java_command(self.root, heap), main, "-c", str(self.root / conf)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            self._processes.append(process)
            _wait_port(port, process, log)
        _wait_registered(self.name_server)
        return self

    def stop(self, keep_store: bool = False, *, crash: bool = False) -> None:
        """SIGTERM both processes (a clean shutdown; SIGKILL with ``crash``); the store is
        deleted unless ``keep_store``."""
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL if crash else signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self._processes.clear()
        if not keep_store:
            shutil.rmtree(self.store, ignore_errors=True)


# Finds messages through the broker's index with RocketMQ's own Java client: each argument
# after the topic is key=K (queryMessage) or uniq=U (viewMessage by UNIQ_KEY).
QUERY_JAVA = """
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.common.message.MessageExt;

public class QueryByKey {
    public static void main(String[] args) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("index-query-group");
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("query" + System.nanoTime());
        consumer.start();
        try {
            for (int i = 2; i < args.length; i++) {
                String[] what = args[i].split("=", 2);
                if (what[0].equals("key")) {
                    QueryResult found =
                        consumer.queryMessage(args[1], what[1], 64, 0, Long.MAX_VALUE);
                    for (MessageExt m : found.getMessageList()) {
                        System.out.println(args[i] + "\\t" + m.getCommitLogOffset());
                    }
                } else {
                    MessageExt m = consumer.viewMessage(args[1], what[1]);
                    System.out.println(args[i] + "\\t" + m.getCommitLogOffset());
                }
            }
        } finally {
            consumer.shutdown();
        }
    }
}
"""


def query_by_key(
    cluster: RocketMQCluster | str, topic: str, asked: list[str], work_dir: Path
) -> dict[str, set[int]]:
    """Ask the cluster's broker (or the brokers a name-server address names, such as a
    rocketlite broker's remoting port), with RocketMQ's Java client, for the messages of
    ``topic`` under each ``key=K`` or ``uniq=U`` in ``asked``: the commit-log offsets it
    answers."""
    name_server = cluster if isinstance(cluster, str) else cluster.name_server
    source = work_dir / "QueryByKey.java"
    source.write_text(QUERY_JAVA)
    command = [*java_command(work_dir, "256m"), str(source), name_server, topic, *asked]
    run = subprocess.run(command, capture_output=True, timeout=120)
    out = run.stdout.decode()
    assert run.returncode == 0, out + run.stderr.decode()[-3000:]
    answers: dict[str, set[int]] = {}
    for line in out.splitlines():
        what, _, offset = line.partition("\t")
        if what in asked:
            answers.setdefault(what, set()).add(int(offset))
    return answers


def make_topic(client, topic: str, timeout_s: float = 30) -> tuple[list, int]:
    """Create ``topic`` on an Apache RocketMQ cluster as its producers do: sends to queue 0
    through TBW102's route (the broker creates the topic) until the topic's own route names
    it. Returns its writable queues and how many ``b"first"`` messages went to queue 0 on
    the way (``client`` is a RemotingClient)."""
    from rmq_spark.errors import NotFoundError
    from rmq_spark.structs import MessageQueue

    first = 0

    def routed() -> list:
        nonlocal first
        try:
            return client.route(topic).writable
        except NotFoundError as missing:
            default = client.route("TBW102").writable[0]
            client.send(MessageQueue(topic, default.broker_name, 0), [b"first"])
            first += 1
            raise AssertionError(str(missing)) from None

    queues = eventually(routed, what=f"topic {topic} in its route", timeout=timeout_s, interval=1)
    return queues, first
