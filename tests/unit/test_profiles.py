"""Settings profiles: a profile's values are defaults under the environment, and a bad name is one sentence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.infra.profiles import PROFILES
from lakehouse.infra.settings import Settings, SettingsError


def test_local_is_every_default():
    """The local profile changes nothing: its settings equal the bare defaults."""
    assert PROFILES["local"] == {}
    assert Settings.from_env({"LAKEHOUSE_HOME": "/h"}) == Settings(home="/h")


def test_cluster_points_every_engine_at_its_scaled_out_form():
    """The cluster profile: a standalone master, three Kafka nodes in the bootstrap, a lake on an S3 endpoint."""
    s = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_HOME": "/h"})
    assert s.profile == "cluster"
    assert s.spark_master.startswith("spark://")
    assert s.kafka_nodes == 3 and len(s.kafka_bootstrap.split(",")) == 3
    assert s.lake_root.startswith("s3a://") and s.s3_endpoint and s.s3_path_style
    # No profile carries a secret: S3 keys come from the environment alone.
    assert not [k for values in PROFILES.values() for k in values if "KEY" in k or "SECRET" in k]


def test_a_variable_that_is_set_wins_over_its_profile():
    env = {"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_SPARK_MASTER": "spark://10.0.0.5:7077",
           "LAKEHOUSE_LAKE_ROOT": "", "LAKEHOUSE_HOME": "/h"}
    s = Settings.from_env(env)
    assert s.spark_master == "spark://10.0.0.5:7077"
    assert s.lake_root == PROFILES["cluster"]["LAKEHOUSE_LAKE_ROOT"]   # an empty variable is unset
    assert Settings.from_env(env, profile="local").spark_master == "spark://10.0.0.5:7077"
    assert Settings.from_env({"LAKEHOUSE_HOME": "/h"}, profile="local").lake_root == "/h/lake"


def test_an_unknown_profile_is_one_sentence():
    with pytest.raises(SettingsError, match=r"^LAKEHOUSE_PROFILE='big' is not valid; use local or cluster\.$"):
        Settings.from_env({"LAKEHOUSE_PROFILE": "big"})


def test_settings_lists_a_profile_it_is_asked_for(tmp_path):
    """`lakehouse settings --profile cluster` shows the cluster's values whatever LAKEHOUSE_PROFILE says."""
    lakehouse = Path(sys.executable).with_name("lakehouse")
    out = subprocess.run([str(lakehouse), "settings", "--profile", "cluster"], capture_output=True, text=True,
                         env={"LAKEHOUSE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stderr
    first, *rows = out.stdout.splitlines()
    assert first.startswith("Settings under profile cluster; LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:7077")
    values = {r.split("|")[0].strip(): r.split("|")[1].strip() for r in rows if r.startswith("LAKEHOUSE_")}
    assert values["LAKEHOUSE_PROFILE"] == "cluster"
    assert values["LAKEHOUSE_LAKE_ROOT"] == "s3a://lakehouse/lake"
    assert values["LAKEHOUSE_KAFKA_BOOTSTRAP"] == "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096"


def test_doctor_names_each_service_that_does_not_answer_in_one_sentence():
    """With nothing listening, each service of the cluster profile is a problem saying how to start it; a local
    profile's Spark and lake need nothing to answer."""
    from lakehouse.infra.services import check_services
    from tests.conftest import free_port

    kafka, master, s3 = free_port(), free_port(), free_port()
    cluster = Settings.from_env({"LAKEHOUSE_PROFILE": "cluster", "LAKEHOUSE_HOME": "/h", "LAKEHOUSE_KAFKA_PORT": str(kafka),
                                 "LAKEHOUSE_KAFKA_CONTROLLER_PORT": str(kafka + 1),
                                 "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{master}",
                                 "LAKEHOUSE_S3_ENDPOINT": f"http://127.0.0.1:{s3}"})
    services = {s.name: s for s in check_services(cluster)}
    assert [s.failed for s in services.values()] == [True, True, True]
    assert "`lakehouse kafka start --nodes 3`" in services["kafka"].problem
    assert f"No Spark master answers at 127.0.0.1:{master}" in services["spark"].problem
    assert "`lakehouse s3 start`" in services["lake"].problem
    assert all("\n" not in s.problem for s in services.values())
    from lakehouse.infra.services import _lake, _spark

    assert not _spark(Settings(home="/h")).failed and not _lake(Settings(home="/h")).failed
