"""Shared fixtures: one Spark session and one real KRaft broker per test process (its topics dropped after each module),
stopped by PID; a broker of a module's own for the tests that stop or kill it."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

# Before any test module imports great_expectations itself: without quality/__init__.py's guard, GX's probe
# of Spark Connect exits an xdist worker (its __main__ has no __file__) with code 0, and pytest reports
# "no tests ran" for a run of test_quality.py alone.
import lakehouse.quality  # noqa: F401
from lakehouse.infra.jars import fetch_jars
from lakehouse.infra.kafka_broker import KafkaNode, local_node
from lakehouse.infra.settings import Settings
from lakehouse.infra.spark import get_spark


TIERS = ("unit", "integration", "e2e")
JVM_FIXTURES = {"spark", "broker", "own_broker", "jars_dir"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's tier from its folder (`-m unit`, `-m integration`, `-m e2e` run one alone); a test of the unit
    folder that starts a JVM (Spark or a broker) counts as integration, so that `-m unit` needs no JVM."""
    for item in items:
        folder = item.path.parent.name
        tier = folder if folder in TIERS else "integration"
        if tier == "unit" and JVM_FIXTURES & set(getattr(item, "fixturenames", ())):
            tier = "integration"
        if tier == "e2e":
            item.own_markers[:] = [m for m in item.own_markers if m.name != "integration"]
        item.add_marker(getattr(pytest.mark, tier))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def jars_dir() -> str:
    """The project's jars folder (filled by `lakehouse setup`; fetched here if missing)."""
    folder = os.environ.get("LAKEHOUSE_JARS_DIR") or Settings().jars_dir
    fetch_jars(folder)
    return folder


# The in-process session of the integration tests evaluates expressions without generating code: their
# batches are tens of rows, where compiling each new plan's classes is most of a job's time (tests/integration
# /test_gold.py: 143-145 s with code generation, 114 s without, 2026-11-29). Results do not depend on it. The
# e2e tests (the demo, the CLI, Dagster, the stream drills) run `lakehouse` processes with the product's own
# settings, so generated code stays tested on the whole pipeline.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@pytest.fixture(scope="session")
def spark(jars_dir: str, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("spark-home")
    settings = Settings(home=str(home), jars_dir=jars_dir, spark_shuffle_partitions=2, spark_conf=INTERPRETED)
    session = get_spark(settings, "lakehouse-tests")
    yield session
    session.stop()


def _settings(home: Path, jars_dir: str, kafka_port: int, kafka_controller_port: int) -> Settings:
    """Settings whose lake, Dagster home and other folders are under `home` (each derived from it when built)."""
    return Settings(home=str(home), jars_dir=jars_dir, kafka_port=kafka_port,
                    kafka_controller_port=kafka_controller_port, spark_shuffle_partitions=2)


def _started_broker(jars_dir: str, home: Path) -> tuple[Settings, KafkaNode]:
    """A real one-node KRaft broker on free ports, in its own folder; settings that point at it."""
    settings = _settings(home, jars_dir, free_port(), free_port())
    node = local_node(settings)
    node.start(jars_dir)
    return settings, node


@pytest.fixture(scope="session")
def process_broker(jars_dir: str, tmp_path_factory: pytest.TempPathFactory):
    """The test process's broker, which `broker` lends to one module at a time (starting one took 7-14 s a module)."""
    settings, node = _started_broker(jars_dir, tmp_path_factory.mktemp("kafka"))
    yield settings
    node.stop()
    assert node.read_pid() is None


@pytest.fixture(scope="module")
def broker(process_broker: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings that point at the process's broker, with no topic on it yet and a state folder of the module's own
    (its lake, Dagster home, stream PID files); every topic the module made is deleted when it ends."""
    drop_topics(process_broker.kafka_bootstrap)
    yield _settings(tmp_path_factory.mktemp("lakehouse"), process_broker.jars_dir, process_broker.kafka_port,
                    process_broker.kafka_controller_port)
    drop_topics(process_broker.kafka_bootstrap)


def drop_topics(bootstrap: str, timeout_s: float = 60) -> None:
    """Delete every topic but Kafka's own, and wait until the broker no longer lists them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    names = [t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")]
    if not names:
        return
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result()
    deadline = time.monotonic() + timeout_s
    while set(names) & set(admin.list_topics(timeout=10).topics):
        assert time.monotonic() < deadline, f"topics still listed {timeout_s:.0f} s after their deletion"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def own_broker(jars_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A broker of the module's own, for tests that stop it, kill it or read its state folder."""
    settings, node = _started_broker(jars_dir, tmp_path_factory.mktemp("lakehouse"))
    yield settings
    node.stop()
    assert node.read_pid() is None


@pytest.fixture
def lake_root(tmp_path: Path) -> str:
    return str(tmp_path / "lake")
