"""`lakehouse spark-cluster`'s arguments and sentences, and the Spark settings a spark:// master adds (no JVM)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from lakehouse.cli.main import build_parser, main
from lakehouse.infra import jars as jars_module
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import EXECUTOR_MEMORY, cluster_conf, spark_conf
from lakehouse.infra.spark_cluster import MASTER_CLASS, ClusterError, ClusterSpec, Daemon, check_can_start
from lakehouse.orchestration.resources import build_resources


@pytest.fixture
def jars(tmp_path: Path) -> Path:
    """A jars folder as setup leaves it, with a stand-in jar."""
    folder = tmp_path / "jars" / "spark"
    folder.mkdir(parents=True)
    (folder / "delta-spark_2.13-4.4.1.jar").write_bytes(b"PK")
    (folder / jars_module._STAMP).write_text(jars_module._manifest_digest("spark"))
    return folder.parent


def conf(jars: Path, **given) -> dict[str, str]:
    return spark_conf(Settings(home=str(jars.parent), jars_dir=str(jars), spark_class_archive=False, **given))


def test_start_parses_its_flags_and_defaults_to_spark_ports():
    args = build_parser().parse_args(["spark-cluster", "start"])
    assert (args.workers, args.cores, args.app_cores, args.memory, args.port, args.ui_port) == (1, None, None, "2g",
                                                                                                 7077, 8080)
    args = build_parser().parse_args(["spark-cluster", "start", "--workers", "2", "--cores", "3", "--app-cores", "2",
                                      "--memory", "4g", "--port", "17077", "--ui-port", "18080"])
    assert (args.workers, args.cores, args.app_cores, args.memory, args.port, args.ui_port) == (2, 3, 2, "4g", 17077,
                                                                                                 18080)
    assert build_parser().parse_args(["spark-cluster", "status"]).action == "status"


@pytest.mark.parametrize("argv, named", [
    (["spark-cluster", "start", "--memory", "lots"], "'lots' is not a size"),
    (["spark-cluster", "start", "--workers", "0"], "'0' is not an integer from 1 to 64"),
    (["spark-cluster", "start", "--port", "70000"], "'70000' is not an integer from 1 to 65535"),
    (["spark-cluster", "restart"], "invalid choice: 'restart'"),
])
def test_a_bad_argument_is_one_sentence(argv, named, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and err.count("\n") == 1


def test_status_without_a_cluster_says_so_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    assert main(["spark-cluster", "status"]) == 1
    assert capsys.readouterr().out == "The Spark cluster is not running (`lakehouse spark-cluster start` starts it).\n"
    assert main(["spark-cluster", "stop"]) == 0
    assert capsys.readouterr().out == "The Spark cluster is not running.\n"


def test_a_taken_port_and_equal_ports_are_refused_before_anything_starts(tmp_path):
    settings = Settings(home=str(tmp_path))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        with pytest.raises(ClusterError, match=f"port {taken} on 127.0.0.1 .the master's web UI. is taken"):
            check_can_start(settings, ClusterSpec(port=taken + 1 if taken < 65535 else taken - 1, ui_port=taken))
    with pytest.raises(ClusterError, match="--port and --ui-port are both 9000"):
        check_can_start(settings, ClusterSpec(port=9000, ui_port=9000))
    assert not (tmp_path / "spark-cluster").exists()


def test_a_pid_file_naming_another_program_is_stale(tmp_path):
    """A reused PID (here this test's own process) is never taken for the master, and its file goes."""
    daemon = Daemon(MASTER_CLASS, tmp_path / "master")
    daemon.directory.mkdir()
    daemon.pid_file.write_text(str(os.getpid()))
    assert daemon.read_pid() is None and not daemon.pid_file.exists()
    assert daemon.stop() is None


def test_default_sizes_let_two_applications_run_at_once():
    """Workers offer twice the machine's cores between them, an application gets at most the machine's."""
    cores = os.cpu_count() or 1
    assert ClusterSpec().worker_cores == 2 * cores and ClusterSpec().application_cores == cores
    assert ClusterSpec(workers=2).worker_cores == max(1, cores)
    assert ClusterSpec(cores=3, app_cores=1).worker_cores == 3 and ClusterSpec(app_cores=1).application_cores == 1


def test_a_local_master_gets_no_cluster_settings(jars):
    """local[*] (the default) and local[N] sessions have none of the cluster's keys: their configuration is as before."""
    cluster_keys = set(cluster_conf(Settings(spark_master="spark://127.0.0.1:7077")))
    for master in ("local[*]", "local[2]"):
        assert cluster_conf(Settings(spark_master=master)) == {}
        assert not cluster_keys & set(conf(jars, spark_master=master))


def test_a_loopback_cluster_gets_this_python_executor_sizes_and_a_loopback_driver(jars):
    got = conf(jars, spark_master="spark://127.0.0.1:7077", spark_java_options="-XX:+UseG1GC")
    assert got["spark.master"] == "spark://127.0.0.1:7077"
    assert got["spark.pyspark.python"] == sys.executable
    assert got["spark.executor.memory"] == EXECUTOR_MEMORY
    assert got["spark.executor.extraJavaOptions"].endswith("-XX:+UseG1GC")
    assert (got["spark.driver.host"], got["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1")
    assert "spark.jars" in got and "spark.cores.max" not in got   # the master caps each application


def test_a_remote_cluster_keeps_spark_s_driver_address_and_the_user_s_settings_win(jars):
    got = conf(jars, spark_master="spark://spark-a:7077,spark-b:7077",
               spark_conf={"spark.executor.memory": "6g", "spark.pyspark.python": "/opt/venv/bin/python"})
    assert "spark.driver.host" not in got and "spark.driver.bindAddress" not in got
    assert (got["spark.executor.memory"], got["spark.pyspark.python"]) == ("6g", "/opt/venv/bin/python")


def test_a_dagster_runs_session_gets_the_cluster_settings_too(jars):
    """The session a Dagster run starts from its resource has the same cluster keys as the CLI's."""
    settings = Settings(home=str(jars.parent), jars_dir=str(jars), spark_master="spark://127.0.0.1:7077",
                        spark_class_archive=False)
    assert spark_conf(build_resources(settings)["spark"].settings()) == spark_conf(settings)
