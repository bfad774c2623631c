"""Apache RocketMQ itself for the tests that compare against it: a name server and one broker
(``broker-a`` of ``DefaultCluster``) on free loopback ports with a temporary store, started
from a build named by ``ROCKETMQ_HOME`` (its ``lib/`` of jars and ``conf/``), and the Java
command line to run its tools and clients with. :class:`ReplicatedCluster` starts a name
server, broker-a as a master with a slave, and a broker-b master, each broker killable and
restartable on its own."""

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
        try:
            self._start_processes(env)
            _wait_registered(self.name_server)
        except BaseException:
            self.stop()  # what started would outlive the test run
            raise
        return self

    def _start_processes(self, env: dict[str, str]) -> None:
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


def _home(root: Path) -> Path:
    """A ROCKETMQ_HOME for processes under ``root``: RocketMQ's logback files, logging
    under ``root``."""
    home = root / "home"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    for conf in (Path(ROCKETMQ_HOME) / "conf").glob("logback_*.xml"):
        (home / "conf" / conf.name).write_text(conf.read_text().replace("${user.home}", str(root)))
    return home


class _JavaProcess:
    """One RocketMQ process (name server or broker) from a config file, in its own process
    group, its output in ``root/<name>.out``."""

    def __init__(self, root: Path, name: str, main: str, heap: str, port: int) -> None:
        self.root, self.name, self.main, self.heap, self.port = root, name, main, heap, port
        self.conf = root / f"{name}.conf"
        self.process: subprocess.Popen | None = None

    def start(self, env: dict[str, str]) -> None:
        log = self.root / f"{self.name}.out"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [*java_command(self.root, self.heap), self.main, "-c", str(self.conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        _wait_port(self.port, self.process, log)

    def stop(self, *, crash: bool = False) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGKILL if crash else signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ReplicatedCluster:
    """Apache RocketMQ as a cluster with replicas: a name server (``name_server``),
    ``broker-a`` as a master (broker id 0) with a slave (id 1, ``brokerRole=SLAVE``, its own
    store and ports, replicating from the master's HA port, listenPort+1) and a
    ``broker-b`` master, with small heaps. ``address[(name, id)]`` is each broker's
    address; :meth:`kill` SIGKILLs one and :meth:`start_broker` starts it again on its
    store. ``settings`` are extra ``broker.conf`` lines of every broker."""

    BROKERS = (("broker-a", 0), ("broker-a", 1), ("broker-b", 0))

    def __init__(self, root: Path, settings: tuple[str, ...] = (), heap: str = "384m") -> None:
        self.root = root
        self.settings = settings
        self.home = _home(root)
        self.env = {**os.environ, "ROCKETMQ_HOME": str(self.home)}
        port = _free_port()
        self.name_server = f"127.0.0.1:{port}"
        self._namesrv = _JavaProcess(
            root, "namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "128m", port
        )
        self._namesrv.conf.write_text(f"listenPort={port}\n")
        self._brokers: dict[tuple[str, int], _JavaProcess] = {}
        self.address: dict[tuple[str, int], str] = {}
        for name, broker_id in self.BROKERS:
            port = _free_port(spacing=2)
            node = _JavaProcess(
                root,
                f"{name}-{broker_id}",
                "org.apache.rocketmq.broker.BrokerStartup",
                heap,
                port,
            )
            store = root / f"store-{name}-{broker_id}"
            node.conf.write_text(
                "\n".join(
                    [
                        "brokerClusterName=DefaultCluster",
                        f"brokerName={name}",
                        f"brokerId={broker_id}",
                        f"brokerRole={'ASYNC_MASTER' if broker_id == 0 else 'SLAVE'}",
                        "flushDiskType=ASYNC_FLUSH",
                        f"namesrvAddr={self.name_server}",
                        "brokerIP1=127.0.0.1",
                        "brokerIP2=127.0.0.1",
                        f"listenPort={port}",
                        f"haListenPort={port + 1}",
                        f"storePathRootDir={store}",
                        f"storePathCommitLog={store / 'commitlog'}",
                        "autoCreateTopicEnable=true",
                        "mappedFileSizeCommitLog=16777216",
                        "mappedFileSizeConsumeQueue=600000",
                        "diskMaxUsedSpaceRatio=98",
                        *settings,
                    ]
                )
                + "\n"
            )
            self._brokers[(name, broker_id)] = node
            self.address[(name, broker_id)] = f"127.0.0.1:{port}"

    def start(self) -> ReplicatedCluster:
        try:
            self._namesrv.start(self.env)
            for key in self.BROKERS:
                self._brokers[key].start(self.env)
            self.wait_routed(self.BROKERS)
        except BaseException:
            self.stop()  # what started would outlive the test run
            raise
        return self

    def start_broker(self, name: str, broker_id: int) -> None:
        """Start a stopped broker again on its store, and wait until the name server
        routes it."""
        self._brokers[(name, broker_id)].start(self.env)
        self.wait_routed([(n, i) for n, i in self.BROKERS if self.running(n, i)])

    def kill(self, name: str, broker_id: int) -> None:
        """SIGKILL one broker (the name server drops it from its routes at once)."""
        self._brokers[(name, broker_id)].stop(crash=True)

    def running(self, name: str, broker_id: int) -> bool:
        return self._brokers[(name, broker_id)].running

    def replicas(self, topic: str = "TBW102") -> dict[str, dict[int, str]]:
        """The replicas the name server's route of ``topic`` names now."""
        from rmq_spark.client.remoting import RemotingClient
        from rmq_spark.errors import NotFoundError

        with RemotingClient(self.name_server) as client:
            try:
                return client.route(topic).replicas
            except NotFoundError:
                return {}

    def wait_routed(self, brokers, topic: str = "TBW102", timeout: float = 60) -> None:
        """Until the route of ``topic`` names exactly ``brokers`` ((name, id) pairs)."""
        wanted = {(name, i): self.address[(name, i)] for name, i in brokers}

        def routed() -> bool:
            found = {
                (n, i): a for n, group in self.replicas(topic).items() for i, a in group.items()
            }
            assert found == wanted, f"route of {topic}: {found}, waiting for {wanted}"
            return True

        eventually(routed, what=f"the route of {topic}", timeout=timeout, interval=0.3)

    def make_topic(self, topic: str, timeout_s: float = 60) -> list:
        """``topic`` on both masters, made by a first send to queue 0 of each (as RocketMQ's
        producers make a topic), replicated to broker-a's slave; returns its readable queues
        and leaves one ``b"first"`` message in queue 0 of each group."""
        from rmq_spark.client.remoting import RemotingClient
        from rmq_spark.structs import MessageQueue

        with RemotingClient(self.name_server) as client:
            client.route("TBW102")  # the masters' addresses
            for name in ("broker-a", "broker-b"):
                client.send(MessageQueue(topic, name, 0), [b"first"])

            def routed() -> list:
                route = client.route(topic)
                assert {mq.broker_name for mq in route.writable} == {"broker-a", "broker-b"}
                return route.readable

            queues = eventually(routed, what=f"{topic} routed", timeout=timeout_s, interval=0.5)
        self.wait_slave_caught_up(queues, timeout_s)
        return queues

    def wait_slave_caught_up(self, queues, timeout_s: float = 60) -> None:
        """Until broker-a's slave holds every message its master holds in ``queues`` and
        serves pulls of them (it takes the topic's config from the master every 10 s)."""
        from rmq_spark.client.remoting import RemotingClient
        from rmq_spark.errors import UnavailableError
        from rmq_spark.structs import PullStatus

        mine = [mq for mq in queues if mq.broker_name == "broker-a"]
        with RemotingClient(self.name_server) as master, self.slave_client() as slave:

            def caught_up() -> bool:
                for mq in mine:
                    end = master.max_offset(mq)
                    assert slave.max_offset(mq) == end, f"slave behind on {mq}"
                    if end:
                        try:
                            answer = slave.pull(mq, end - 1, max_messages=1)
                        except UnavailableError as exc:  # no topic config there yet
                            raise AssertionError(str(exc)) from None
                        assert answer.status == PullStatus.FOUND, f"slave pull of {mq}: {answer}"
                return True

            eventually(caught_up, what="broker-a's slave to catch up", timeout=timeout_s,
                       interval=0.5)  # fmt: skip

    def slave_client(self):
        """A RemotingClient that asks broker-a's slave alone (its name server, port 1,
        never answers, so it keeps to the replica it is given)."""
        from rmq_spark.client.connection import NO_RETRY, ClientConfig
        from rmq_spark.client.remoting import RemotingClient

        client = RemotingClient("127.0.0.1:1", ClientConfig(retry=NO_RETRY))
        client.learn_replicas("broker-a", {1: self.address[("broker-a", 1)]})
        return client

    def stop(self) -> None:
        for node in self._brokers.values():
            node.stop()
        self._namesrv.stop()
        for name, broker_id in self.BROKERS:
            shutil.rmtree(self.root / f"store-{name}-{broker_id}", ignore_errors=True)
