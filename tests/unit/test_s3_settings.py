"""A lake on S3: LAKEHOUSE_S3_* settings, what they give Spark's S3A and pyarrow, the S3 jars only for an s3a:// lake."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyarrow import fs as pafs

from lakehouse.infra import jars as jars_module
from lakehouse.infra.jars import JarsMissing
from lakehouse.infra.s3_server import S3ServerError, lake_bucket, local_server
from lakehouse.infra.settings import Settings, SettingsError
from lakehouse.infra.spark import S3_CREDENTIALS, spark_conf
from lakehouse.streaming import health

SECRET = "wJalrXUtnFEMI-not-a-real-secret"


def _classpath(folder: Path, name: str, jars: tuple[str, ...]) -> None:
    (folder / name).mkdir(parents=True)
    for jar in jars:
        (folder / name / jar).write_bytes(b"PK")
    (folder / name / jars_module._STAMP).write_text(jars_module._manifest_digest(name))   # as `lakehouse setup` leaves it


@pytest.fixture
def jars(tmp_path: Path) -> Path:
    """A jars folder as setup fills it, with stand-in jars: Delta's classpath, and S3A's unless a test removes it."""
    folder = tmp_path / "jars"
    _classpath(folder, "spark", ("delta-spark_2.13-4.4.0.jar",))
    _classpath(folder, "s3", ("hadoop-aws-3.5.0.jar", "s3-2.35.4.jar"))
    return folder


def conf(jars: Path, **given) -> dict[str, str]:
    return spark_conf(Settings(home=str(jars.parent), jars_dir=str(jars), spark_class_archive=False, **given))


def test_s3_settings_parse_and_refuse_with_the_variable_named():
    s = Settings.from_env({"LAKEHOUSE_S3_ENDPOINT": "http://127.0.0.1:9000", "LAKEHOUSE_S3_REGION": "eu-west-1",
                           "LAKEHOUSE_S3_PATH_STYLE": "yes"})
    assert (s.s3_endpoint, s.s3_region, s.s3_path_style) == ("http://127.0.0.1:9000", "eu-west-1", True)
    defaults = Settings.from_env({})
    assert (defaults.s3_endpoint, defaults.s3_region, defaults.s3_path_style) == ("", "", False)
    for variable, value in (("LAKEHOUSE_S3_ENDPOINT", "127.0.0.1:9000"), ("LAKEHOUSE_S3_ENDPOINT", "http://a:b@h:9"),
                            ("LAKEHOUSE_S3_REGION", "EU West"), ("LAKEHOUSE_S3_PATH_STYLE", "maybe")):
        with pytest.raises(SettingsError, match=f"^{variable}="):
            Settings.from_env({variable: value})


def test_a_local_lake_gets_neither_the_s3_jars_nor_s3a_settings(jars):
    """The default lake's JVM starts as before: no S3A keys, no S3 jars (not even their folder is needed)."""
    for name in (jars / "s3").iterdir():
        name.unlink()
    (jars / "s3").rmdir()
    local = conf(jars, s3_endpoint="http://127.0.0.1:9000", s3_path_style=True)
    assert not [k for k in local if "s3a" in k] and "spark.driver.extraClassPath" not in local
    assert local["spark.jars"].split(",") == [str(jars / "spark" / "delta-spark_2.13-4.4.0.jar")]


def test_an_s3a_lake_gets_the_s3_jars_and_its_bucket_settings(jars):
    c = conf(jars, lake_root="s3a://bucket/lake", s3_endpoint="http://127.0.0.1:9000", s3_path_style=True)
    assert {Path(j).name for j in c["spark.jars"].split(",")} == {
        "delta-spark_2.13-4.4.0.jar", "hadoop-aws-3.5.0.jar", "s3-2.35.4.jar"}
    # On the driver's class path too: a flow's thread does not see spark.jars' loader.
    assert {Path(j).name for j in c["spark.driver.extraClassPath"].split(":")} == {"hadoop-aws-3.5.0.jar", "s3-2.35.4.jar"}
    assert c["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert c["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert c["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert c["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"     # a store of its own still signs with a region
    assert c["spark.hadoop.fs.s3a.aws.credentials.provider"] == S3_CREDENTIALS
    aws = conf(jars, lake_root="s3a://bucket/lake", s3_region="eu-west-1")
    assert aws["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1" and "spark.hadoop.fs.s3a.endpoint" not in aws
    assert aws["spark.hadoop.fs.s3a.path.style.access"] == "false"
    # A user's own LAKEHOUSE_SPARK_CONF entry wins, as for every other key.
    own = conf(jars, lake_root="s3a://bucket/lake", spark_conf={"spark.hadoop.fs.s3a.aws.credentials.provider": "x.Y"})
    assert own["spark.hadoop.fs.s3a.aws.credentials.provider"] == "x.Y"


def test_keys_come_from_the_environment_only_and_are_never_in_settings_or_conf(jars, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    settings = Settings.from_env({"LAKEHOUSE_LAKE_ROOT": "s3a://bucket/lake", "LAKEHOUSE_HOME": str(jars.parent),
                                  "LAKEHOUSE_JARS_DIR": str(jars), "LAKEHOUSE_S3_ENDPOINT": "https://s3.example.com"})
    c = spark_conf(settings)
    assert c["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert not [v for v in c.values() if SECRET in v or "AKIDEXAMPLE" in v]
    assert SECRET not in repr(settings) and SECRET not in " ".join(settings.shown(n) for n in ("s3_endpoint", "spark_conf"))


def test_an_s3a_lake_without_the_s3_jars_says_to_run_setup(jars):
    (jars / "s3" / jars_module._STAMP).unlink()
    with pytest.raises(JarsMissing, match="The s3 jars .* run `lakehouse setup` first"):
        conf(jars, lake_root="s3a://bucket/lake")


def test_setup_fetches_the_s3_classpath_and_its_stamp_is_its_own():
    """`lakehouse setup` resolves the s3 profile too; a change to it does not touch the others' stamps."""
    assert "s3" in jars_module.CLASSPATHS
    digests = {name: jars_module._manifest_digest(name) for name in jars_module.CLASSPATHS}
    assert len(set(digests.values())) == len(digests)


def test_pyarrow_reads_the_lake_from_the_same_endpoint_as_spark(monkeypatch):
    """`lakehouse status` and the Dagster definitions read checkpoints and Delta logs with pyarrow, at the same store."""
    health._s3.cache_clear()
    monkeypatch.setenv("LAKEHOUSE_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("LAKEHOUSE_S3_PATH_STYLE", "true")
    fs, path = health.filesystem("s3a://bucket/lake/silver/x/_delta_log")
    assert isinstance(fs, pafs.S3FileSystem) and path == "bucket/lake/silver/x/_delta_log"
    assert fs.region == "us-east-1"
    local, local_path = health.filesystem("/srv/lake/silver/x")
    assert isinstance(local, pafs.LocalFileSystem) and local_path == "/srv/lake/silver/x"
    health._s3.cache_clear()


def test_the_local_s3_server_is_named_by_the_settings(tmp_path):
    settings = Settings(home=str(tmp_path), lake_root="s3a://trial/lake", s3_endpoint="http://127.0.0.1:29000")
    server = local_server(settings)
    assert (server.host, server.port, server.endpoint) == ("127.0.0.1", 29000, "http://127.0.0.1:29000")
    assert server.pid_file == tmp_path / "s3" / "s3.pid" and lake_bucket(settings) == "trial"
    assert server.read_pid() is None
    with pytest.raises(S3ServerError, match="LAKEHOUSE_S3_ENDPOINT=https://s3.eu-west-1.amazonaws.com is not a local"):
        local_server(Settings(home=str(tmp_path), s3_endpoint="https://s3.eu-west-1.amazonaws.com"))
    with pytest.raises(S3ServerError, match="is not on S3"):
        lake_bucket(Settings(home=str(tmp_path)))


def test_a_dagster_runs_own_session_gets_the_s3_settings_too(jars):
    """A run's Spark resource rebuilds the settings: the lake root and LAKEHOUSE_S3_* must survive it (they pick the jars)."""
    from lakehouse.orchestration.resources import build_resources

    settings = Settings(home=str(jars.parent), jars_dir=str(jars), spark_class_archive=False, lake_root="s3a://b/lake",
                        s3_endpoint="http://127.0.0.1:9000", s3_region="eu-west-1", s3_path_style=True)
    assert spark_conf(build_resources(settings)["spark"].settings()) == spark_conf(settings)
