"""A server's Spark session: the project's jars, Delta and the read-only guard, its own session exempt by token."""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from lakehouse.infra.settings import Settings

if TYPE_CHECKING:   # the SQL server's start and status need no Spark in the command's own process
    from pyspark.sql import SparkSession

log = logging.getLogger("lakehouse")

REGISTER_EVERY_S = 5.0  # how soon a table created by another process can be queried by name


def answers(host: str, port: int) -> bool:
    """Whether something accepts connections at host:port (a server of ours, or another program)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def guarded_session(settings: Settings, app_name: str, read_only: bool, conf: Mapping[str, str]) -> SparkSession:
    """Start the server's Spark with the guard; its own session may write (flows, registering tables), clients' may not."""
    from lakehouse.infra.spark import get_spark, project_jars
    from lakehouse.serving.guard_jar import EXTENSION, OWNER, SETTING, build_guard, owner_token

    jars = [*project_jars(settings), str(build_guard(settings.jars_dir))]
    full = {
        "spark.jars": ",".join(jars),
        # A client's session is built in a server thread (Thrift's, Spark Connect's), which sees the JVM's class
        # path, not the loader that spark.jars adds to: without them there, it fails on Delta's catalog class.
        "spark.driver.extraClassPath": os.pathsep.join(jars),
        "spark.sql.extensions": f"io.delta.sql.DeltaSparkSessionExtension,{EXTENSION}",
        SETTING: str(read_only).lower(),
        **conf,
        **settings.spark_conf,
    }
    token = owner_token()   # before the JVM starts: it inherits this process's environment
    spark = get_spark(replace(settings, spark_conf=full), app_name)
    spark.conf.set(OWNER, token)
    return spark


def keep_registered(spark: SparkSession, settings: Settings, stopping: threading.Event,
                    now: threading.Event | None = None) -> None:
    """Register the lake's tables by name, again whenever the set of tables changes, until `stopping` is set.

    It looks every few seconds, or at once when `now` is set (a run step that may have created a table ended).
    Only a change of that set registers anew: a round that finds the same tables costs one listing per table.
    """
    from lakehouse.batch.catalog import existing_tables, register_tables

    now = now or threading.Event()
    names: set[str] | None = None
    while not stopping.is_set():
        now.clear()
        try:
            current = {spec.name for spec in existing_tables(spark, settings.lake_root)}
            if current != names:
                register_tables(spark, settings.lake_root)
                added = sorted(current - (names or set()))
                if added:
                    log.info("tables served by name: %s", ", ".join(added))
                names = current
        except Exception as exc:  # noqa: BLE001 - a table being created right now; the next round sees it
            log.warning("could not register the lake's tables this round: %s", str(exc).splitlines()[0][:300])
        now.wait(REGISTER_EVERY_S)
