"""The Spark driver's classes in a class-data-sharing archive that every new driver JVM starts from.

A new Spark driver loads and links some 15,000 classes (Spark, Delta, the Kafka connector) before its
first query ends, and every command that starts Spark pays for it: `lakehouse run`, `sql` and `stream`
without an endpoint, each Dagster run that starts its own session, a stream restarted by a drill.
The JVM can map those classes from an archive instead (JDK 13+ dynamic CDS): `lakehouse setup` builds
one by running a small Spark workload in a child JVM with `-XX:ArchiveClassesAtExit`, checks it in a
second JVM with `-Xshare:on` (which refuses an archive it cannot use), and only then moves it into
place. A session uses it only when its fingerprint (the java binary, pyspark's jars, the project's jars)
matches and its size is the one recorded at build: the JVM dies of SIGBUS on a truncated archive.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

FOLDER = "class-archive"
_DISABLED = {"LAKEHOUSE_SPARK_CLASS_ARCHIVE": "false"}   # the build's own JVMs must not read an archive
# The JVM's warnings about classes it leaves out of the archive (hundreds, harmless) stay off the terminal.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _java() -> Path | None:
    """The java binary spark-submit runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else (Path(w) if (w := shutil.which("java")) else None)
    return found.resolve() if found is not None and found.exists() else None


def fingerprint(jars_dir: str | Path) -> str | None:
    """What an archive depends on: the JVM binary, pyspark's jars where they are installed, the project's Spark jars.

    The JVM checks the paths and times of the jars an archive was made from and ignores it, silently,
    when they differ (a moved checkout, a reinstalled pyspark): then `lakehouse setup` must build anew.
    """
    import pyspark

    java = _java()
    if java is None:
        return None
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    jars = sorted(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in (Path(jars_dir) / "spark").glob("*.jar"))
    parts = [str(java), str(java.stat().st_mtime_ns), pyspark.__version__, str(spark_jars),
             str(spark_jars.stat().st_mtime_ns) if spark_jars.exists() else "", *jars]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(jars_dir: str | Path) -> Path | None:
    key = fingerprint(jars_dir)
    return Path(jars_dir) / FOLDER / f"spark-{key}.jsa" if key else None


def usable_archive(jars_dir: str | Path) -> Path | None:
    """The archive a new driver may start from, or None: missing, stale, or not the size it was built at."""
    path = archive_path(jars_dir)
    if path is None:
        return None
    try:
        recorded = json.loads(path.with_suffix(".json").read_text())["bytes"]
        return path if path.stat().st_size == recorded else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def java_option(jars_dir: str | Path) -> str:
    """The driver's JVM option for the archive, or '' when there is none to use."""
    path = usable_archive(jars_dir)
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path else ""


@dataclass(frozen=True)
class Built:
    path: Path
    bytes: int
    seconds: float
    reused: bool


def build(jars_dir: str | Path, java_options: str, *, force: bool = False) -> Built:
    """Build the archive for these jars unless a usable one exists; raise RuntimeError if the JVM cannot."""
    existing = usable_archive(jars_dir)
    if existing is not None and not force:
        meta = json.loads(existing.with_suffix(".json").read_text())
        return Built(existing, meta["bytes"], meta["seconds"], reused=True)
    path = archive_path(jars_dir)
    if path is None:
        raise RuntimeError("no java binary found (JAVA_HOME or PATH) to build a class archive with")
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # A partial archive must never sit at the final path: the JVM would map it and crash.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(prefix="class-archive-") as scratch:
            _child("dump", f"{java_options} -XX:ArchiveClassesAtExit={tmp} {_QUIET}", jars_dir, scratch)
            if not tmp.exists() or tmp.stat().st_size == 0:
                raise RuntimeError("the JVM wrote no class archive (it needs JDK 13 or newer)")
            _child("check", f"{java_options} -Xshare:on -XX:SharedArchiveFile={tmp} {_QUIET}", jars_dir, scratch)
        size = tmp.stat().st_size
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    seconds = round(time.monotonic() - started, 1)
    path.with_suffix(".json").write_text(json.dumps({"bytes": size, "seconds": seconds}) + "\n")
    for old in path.parent.glob("spark-*"):   # archives of other jars or JVMs would never be used again
        if old.stem != path.stem:
            old.unlink(missing_ok=True)
    return Built(path, size, seconds, reused=False)


def _child(step: str, java_options: str, jars_dir: str | Path, scratch: str) -> None:
    # A JVM that crashes on a bad archive writes its hs_err file into the scratch folder, not the user's.
    env = {**os.environ, **_DISABLED, "LAKEHOUSE_HOME": scratch, "LAKEHOUSE_JARS_DIR": str(jars_dir),
           "LAKEHOUSE_SPARK_JAVA_OPTIONS": f"{java_options.strip()} -XX:ErrorFile={scratch}/hs_err_%p.log"}
    proc = subprocess.run([sys.executable, "-m", "lakehouse.infra.class_archive", step], env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        # The JVM's own words come before Python's traceback: "Specified shared archive not found", "SIGBUS".
        lines = [line.strip("# ") for line in (proc.stderr + proc.stdout).splitlines() if line[:1].strip()]
        said = [line for line in lines if line and not line.startswith(("Traceback", "A fatal error", "pyspark."))]
        raise RuntimeError(f"the class archive's {step} JVM failed: {' '.join(said[:2]) or 'no output'}")


def _exercise(spark, scratch: str) -> None:
    """Load what the flows load: a Delta write, a parse, windows, a MERGE, a streaming foreachBatch, Kafka's source."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    events = spark.range(2000).select(
        F.col("id"),
        F.to_json(F.struct((F.col("id") % 97).alias("amount_cents"),
                           F.timestamp_seconds(F.col("id") * 7).alias("occurred_at"))).alias("value"))
    events.write.format("delta").save(f"{scratch}/bronze")
    schema = "amount_cents BIGINT, occurred_at TIMESTAMP"
    parsed = (spark.read.format("delta").load(f"{scratch}/bronze")
              .select("id", F.from_json("value", schema).alias("e")).select("id", "e.*"))
    windows = parsed.groupBy(F.window("occurred_at", "1 minute")).agg(F.sum("amount_cents").alias("cents"))
    windows.write.format("delta").save(f"{scratch}/gold")

    def merge(batch, batch_id: int) -> None:
        target = DeltaTable.forPath(spark, f"{scratch}/gold").alias("t")
        update = (batch.select("id", F.from_json("value", schema).alias("e")).select("e.*")
                  .groupBy(F.window("occurred_at", "1 minute")).agg(F.sum("amount_cents").alias("cents")))
        target.merge(update.alias("s"), "t.window = s.window").whenMatchedUpdate(
            set={"cents": "t.cents + s.cents"}).whenNotMatchedInsertAll().execute()

    query = (spark.readStream.format("delta").load(f"{scratch}/bronze").writeStream.foreachBatch(merge)
             .option("checkpointLocation", f"{scratch}/checkpoint").trigger(availableNow=True).start())
    query.awaitTermination()
    DeltaTable.forPath(spark, f"{scratch}/gold").history().collect()
    spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t").load().schema


def _run(step: str) -> int:
    from pyspark import SparkContext

    from lakehouse.infra.settings import Settings
    from lakehouse.infra.spark import get_spark

    settings = Settings.from_env()
    spark = get_spark(settings, app_name=f"class-archive-{step}")
    if step == "dump":
        _exercise(spark, settings.home)
    else:
        spark.range(10).count()
    spark.stop()
    # The JVM writes the archive as it exits, which it does when its stdin closes: wait for that here.
    gateway = SparkContext._gateway
    if gateway is not None and getattr(gateway, "proc", None) is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=600)
        return gateway.proc.returncode or 0
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One step of building the class archive (run by `lakehouse setup`).")
    parser.add_argument("step", choices=("dump", "check"))
    sys.exit(_run(parser.parse_args().step))
