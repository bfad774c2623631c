"""A class-data-sharing archive of the classes a Spark JVM loads, for the JVMs the tests start.

A Spark JVM spends most of its start loading and verifying about 15,000 classes from
pyspark's jars. A dynamic CDS archive (``-XX:ArchiveClassesAtExit``, JDK 13+) holds them
parsed and verified: a JVM started with ``-XX:SharedArchiveFile`` maps it instead, and what
it runs is the same. Measured on the two-core test machine: a SparkSession starts in about
half the time (3.3 s instead of 6.5 s, 4.7 s instead of 8.5 s when loaded) and runs its
first job in 1.0 s instead of 2.4 s; the test of the copy_topic example (one driver) takes
22-24 s instead of 28-31 s, the standalone cluster's (six JVMs) 22-23 s instead of 29-31 s.
The archive takes about 190 MB, and a minute of a core to make.

The archive is made once per machine, JDK and pyspark (its name is a digest of them) by a
Spark driver that runs a little of everything the tests do (Python data sources, batch and
streaming, parquet), in the background while the first tests run (:func:`build_in_background`,
from ``tests/conftest.py``), and kept in the temporary directory for the next runs. A JVM
started before it is there, or one that cannot use it (another JDK, other jars, another
class path), starts as it did without it: the JVM checks the archive and quietly goes on
without it (its CDS messages are turned off). The file is written aside and renamed into
place: a JVM never maps a partial one.

    python -m tests.support.spark_classes build   # make it now (what the background does)

``ROCKETLITE_TESTS_CLASS_ARCHIVE=off`` in the environment: no archive is made or used.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: the JVM options of a short-lived JVM (see tests/support/scripts.py), without the archive
FAST_START = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: a JVM that cannot use the archive says why on stdout, which some tests parse: not here
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: =off: no archive is made or used (e.g. to time the tests without it)
OFF_SWITCH = "ROCKETLITE_TESTS_CLASS_ARCHIVE"


def _pyspark_home() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent


def _java() -> Path | None:
    """The java pyspark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(os.path.realpath(found)) if found and os.path.exists(found) else None


def archive_path() -> Path | None:
    """Where the archive of this JDK and pyspark is (or will be); None without them, or
    with ROCKETLITE_TESTS_CLASS_ARCHIVE=off in the environment."""
    spark, java = _pyspark_home(), _java()
    if spark is None or java is None or os.environ.get(OFF_SWITCH) == "off":
        return None
    digest = hashlib.sha256(FAST_START.encode())
    for path in [java, *java.parent.parent.glob("lib/server/libjvm.*")]:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for jar in sorted((spark / "jars").glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    folder = Path(tempfile.gettempdir()) / f"rocketlite-tests-spark-cds-{os.getuid()}"
    return folder / f"spark-{digest.hexdigest()[:16]}.jsa"


def jvm_options() -> str:
    """The options that map the archive (nothing without a JDK or pyspark)."""
    path = archive_path()
    if path is None or " " in str(path):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build_in_background() -> None:
    """Start making the archive unless it is there: in a process of its own, which no one
    waits for (it runs on when the tests end first); its output goes to build.log."""
    path = archive_path()
    if path is None or path.exists() or " " in str(path):
        return
    # a short-lived process starts it and exits: the build is nobody's child
    command = [sys.executable, "-m", "tests.support.spark_classes", "detach"]
    try:
        subprocess.run(command, env=_env(), check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:  # the tests run on without it
        print(f"the archive of Spark's classes is not being made: {exc}", file=sys.stderr)


def _detach() -> None:
    path = archive_path()
    assert path is not None
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(path.parent / "build.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.spark_classes", "build"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _env() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    path = [repo, *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYSPARK_PYTHON": sys.executable}


def build() -> int:
    """Make the archive: a Spark driver runs :func:`workload` with the options of the tests'
    JVMs and writes the classes it loaded when it exits; then it is renamed into place. One
    build at a time (a lock); the other archives in the folder (older JDKs, pysparks) go."""
    path, spark = archive_path(), _pyspark_home()
    if path is None or spark is None:
        print("no JDK or no pyspark: no archive")
        return 0
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(path.parent / "build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("another build is under way")
            return 0
        if path.exists():
            return 0
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
            options = f"{FAST_START} -XX:ArchiveClassesAtExit={partial} {QUIET}"
            done = subprocess.run(
                [str(spark / "bin" / "spark-submit"), "--master", "local[2]",
                 "--conf", "spark.log.level=WARN",
                 "--driver-java-options", options, __file__, "workload", work],
                env=_env(), stdin=subprocess.DEVNULL, timeout=600,
            )  # fmt: skip
        if done.returncode != 0 or not partial.exists() or partial.stat().st_size == 0:
            partial.unlink(missing_ok=True)
            print(f"the archive was not made (spark-submit exited {done.returncode})")
            return 1
        for old in path.parent.glob("*.jsa*"):
            if old != partial:
                old.unlink(missing_ok=True)
        os.replace(partial, path)
        print(f"made {path} ({path.stat().st_size:,} bytes)")
    return 0


def workload(work: str) -> None:
    """A little of what the tests' Spark drivers do, so its classes are in the archive:
    a Python data source read as a batch and as a stream (AvailableNow), a Python stream
    writer, Arrow UDFs, parquet, foreachBatch."""
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    class Reader(DataSourceReader):
        def read(self, partition):
            for n in range(10):
                yield (n, f"m{n}".encode())

    class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self):
            return {"n": 0}

        def prepareForTriggerAvailableNow(self):
            pass

        def getDefaultReadLimit(self):
            return ReadMaxRows(10)

        def latestOffset(self, start, limit):
            return {"n": min(20, start["n"] + 10)}

        def reportLatestOffset(self):
            return {"n": 20}

        def partitions(self, start, end):
            return [InputPartition(i) for i in range(start["n"], end["n"], 10)]

        def read(self, partition):
            for n in range(partition.value, partition.value + 10):
                yield (n, f"m{n}".encode())

        def commit(self, end):
            pass

    class StreamWriter(DataSourceStreamWriter):
        def write(self, iterator):
            return WriterCommitMessage() if sum(1 for _ in iterator) >= 0 else None

        def commit(self, messages, batch_id):
            pass

        def abort(self, messages, batch_id):
            pass

    class Numbers(DataSource):
        @classmethod
        def name(cls):
            return "cds_numbers"

        def schema(self):
            return "n long, body binary"

        def reader(self, schema):
            return Reader()

        def streamReader(self, schema):
            return StreamReader()

        def streamWriter(self, schema, overwrite):
            return StreamWriter()

    spark = (
        SparkSession.builder.appName("spark-cds")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.dataSource.register(Numbers)
    rows = spark.read.format("cds_numbers").load()
    rows.selectExpr("n", "upper(CAST(body AS STRING)) AS body").write.parquet(f"{work}/batch")
    assert spark.read.parquet(f"{work}/batch").count() == 10

    def upper(batches):
        import pyarrow.compute as pc

        for batch in batches:
            yield batch.set_column(1, "body", pc.utf8_upper(batch.column(1).cast("string")))

    stream = spark.readStream.format("cds_numbers").load()
    for name, writer in (
        ("parquet", stream.writeStream.format("parquet").option("path", f"{work}/parquet")),
        ("foreach", stream.writeStream.foreachBatch(lambda df, _: df.collect())),
        (
            "python",
            stream.mapInArrow(upper, "n long, body string").writeStream.format("cds_numbers"),
        ),
    ):
        query = (
            writer.option("checkpointLocation", f"{work}/checkpoint-{name}")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["workload"]:
        workload(sys.argv[2])
    elif sys.argv[1:] == ["build"]:
        sys.exit(build())
    elif sys.argv[1:] == ["detach"]:
        _detach()
    else:
        sys.exit(__doc__)
