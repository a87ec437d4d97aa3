"""Settings read from LAKEHOUSE_* variables: derived defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import dataclasses

import pytest

from lakehouse.infra.settings import Settings, SettingsError

HOME = "/srv/lakehouse-home"


def test_paths_and_bootstrap_default_from_home():
    """Unset paths derive from home, and the bootstrap from the default host and port."""
    s = Settings.from_env({"LAKEHOUSE_HOME": HOME})
    assert s.home == HOME
    assert s.lake_root == f"{HOME}/lake"
    assert s.jars_dir == f"{HOME}/jars"
    assert s.dagster_home == f"{HOME}/dagster"
    assert s.log_dir == f"{HOME}/logs"
    assert s.kafka_dir == f"{HOME}/kafka"
    assert s.kafka_bootstrap == "127.0.0.1:9092"
    assert s.kafka_port == 9092 and s.kafka_controller_port == 9093
    assert s.spark_conf == {}
    assert s.spark_ui is False


def test_empty_environ_uses_a_lakehouse_home():
    """With nothing set, home is a .lakehouse folder and the lake lives in it."""
    s = Settings.from_env({})
    assert s.home.endswith(".lakehouse")
    assert s.lake_root == f"{s.home}/lake"


def test_explicit_paths_win_over_derived_ones():
    """A set LAKEHOUSE_LAKE_ROOT / LAKEHOUSE_KAFKA_BOOTSTRAP is used as is."""
    s = Settings.from_env({
        "LAKEHOUSE_HOME": HOME,
        "LAKEHOUSE_LAKE_ROOT": "s3a://bucket/lake",
        "LAKEHOUSE_KAFKA_BOOTSTRAP": "broker-1:9092,broker-2:9092",
    })
    assert s.lake_root == "s3a://bucket/lake"
    assert s.kafka_bootstrap == "broker-1:9092,broker-2:9092"
    assert s.jars_dir == f"{HOME}/jars"


def test_empty_variable_counts_as_unset():
    """An empty LAKEHOUSE_KAFKA_PORT falls back to the default rather than failing."""
    s = Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_PORT": ""})
    assert s.kafka_port == 9092


def test_kafka_port_is_parsed_as_int_and_reflected_in_bootstrap():
    """LAKEHOUSE_KAFKA_PORT becomes an int and the derived bootstrap uses it and the host."""
    s = Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_PORT": "19092", "LAKEHOUSE_KAFKA_HOST": "10.0.0.5"})
    assert s.kafka_port == 19092
    assert isinstance(s.kafka_port, int)
    assert s.kafka_bootstrap == "10.0.0.5:19092"


def test_other_typed_settings_are_parsed():
    """Integer and boolean settings are converted from their text."""
    s = Settings.from_env({
        "LAKEHOUSE_HOME": HOME,
        "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "8",
        "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "500",
        "LAKEHOUSE_SPARK_UI": "true",
    })
    assert (s.spark_shuffle_partitions, s.max_offsets_per_trigger, s.spark_ui) == (8, 500, True)
    assert Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_SPARK_UI": "no"}).spark_ui is False


def test_overrides_win_over_the_environment():
    """Keyword overrides to from_env beat the environ values."""
    s = Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_PORT": "19092"}, kafka_port=29092)
    assert s.kafka_port == 29092
    assert s.kafka_bootstrap == "127.0.0.1:29092"


@pytest.mark.parametrize(
    "variable, value",
    [
        ("LAKEHOUSE_KAFKA_PORT", "notaport"),
        ("LAKEHOUSE_KAFKA_CONTROLLER_PORT", "9o93"),
        ("LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS", "four"),
    ],
)
def test_non_numeric_value_raises_settings_error_naming_the_variable(variable, value):
    """A non-numeric integer setting raises SettingsError whose message names the variable."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_HOME": HOME, variable: value})
    assert variable in str(caught.value)
    assert "\n" not in str(caught.value)


def test_port_out_of_range_raises_settings_error_naming_the_variable():
    """A port outside 1-65535 is refused with the variable's name."""
    with pytest.raises(SettingsError, match="LAKEHOUSE_KAFKA_PORT"):
        Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_PORT": "70000"})
    with pytest.raises(SettingsError, match="LAKEHOUSE_KAFKA_CONTROLLER_PORT"):
        Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_CONTROLLER_PORT": "0"})


def test_equal_client_and_controller_ports_raise_settings_error():
    """The same port for client and controller is refused, naming both variables."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_KAFKA_PORT": "9100", "LAKEHOUSE_KAFKA_CONTROLLER_PORT": "9100"})
    message = str(caught.value)
    assert "LAKEHOUSE_KAFKA_PORT" in message
    assert "LAKEHOUSE_KAFKA_CONTROLLER_PORT" in message


def test_settings_error_is_a_value_error():
    """SettingsError is a ValueError, so callers catching ValueError see it."""
    assert issubclass(SettingsError, ValueError)


def test_spark_conf_is_parsed_into_a_dict():
    """LAKEHOUSE_SPARK_CONF 'spark.a=b;spark.c=d' becomes a dict, with spaces and empty items ignored."""
    conf = Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_SPARK_CONF": "spark.a=b;spark.c=d"}).spark_conf
    assert conf == {"spark.a": "b", "spark.c": "d"}
    s = Settings.from_env({
        "LAKEHOUSE_HOME": HOME,
        "LAKEHOUSE_SPARK_CONF": " spark.x = 1 ;; spark.hadoop.fs.s3a.endpoint=http://h:9000/?a=b ;",
    })
    assert s.spark_conf == {"spark.x": "1", "spark.hadoop.fs.s3a.endpoint": "http://h:9000/?a=b"}


def test_java_options_reach_the_driver_after_the_projects_own(tmp_path, jars_dir):
    """The driver JVM gets the throughput collector by default, another value instead of it, the logging options always."""
    from lakehouse.infra.spark import spark_conf

    def options(**given) -> str:
        settings = Settings(home=str(tmp_path), jars_dir=jars_dir, spark_class_archive=False, **given)
        return spark_conf(settings)["spark.driver.extraJavaOptions"]

    assert options().startswith("-Dlog4j2.configurationFile=") and options().endswith(" -XX:+UseParallelGC")
    chosen = options(spark_java_options="-XX:+UseG1GC -Xss4m")
    assert chosen.endswith(" -XX:+UseG1GC -Xss4m") and "UseParallelGC" not in chosen and "-Dlog4j2" in chosen
    # The cap on the JDK's cached direct buffers is the project's own, so a user's value, later on the line, wins.
    cap = "-Djdk.nio.maxCachedBufferSize=262144"
    assert cap in options().split() and cap in chosen.split()
    mine = options(spark_java_options="-Djdk.nio.maxCachedBufferSize=0").split()
    assert mine.index(cap) < mine.index("-Djdk.nio.maxCachedBufferSize=0")


def test_spark_conf_item_without_equals_raises_settings_error():
    """An item without '=' in LAKEHOUSE_SPARK_CONF raises SettingsError naming the variable and the item."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_SPARK_CONF": "spark.a=b;oops"})
    assert "LAKEHOUSE_SPARK_CONF" in str(caught.value)
    assert "oops" in str(caught.value)


def test_describe_lists_every_field_once_with_the_prefix():
    """describe() has one row per dataclass field, named LAKEHOUSE_<FIELD>, with a meaning."""
    rows = Settings.describe()
    names = [name for name, _, _ in rows]
    expected = ["LAKEHOUSE_" + f.name.upper() for f in dataclasses.fields(Settings)]
    assert sorted(names) == sorted(expected)
    assert len(names) == len(set(names))
    assert all(meaning.strip() for _, _, meaning in rows)
    defaults = {name: default for name, default, _ in rows}
    assert defaults["LAKEHOUSE_KAFKA_PORT"] == "9092"
    assert defaults["LAKEHOUSE_LAKE_ROOT"] == "<home>/lake"


# A valid value for each setting other than its default.
SAMPLES = {
    "LAKEHOUSE_PROFILE": "cluster",
    "LAKEHOUSE_HOME": "/srv/other-home", "LAKEHOUSE_LAKE_ROOT": "s3a://bucket/lake", "LAKEHOUSE_JARS_DIR": "/opt/jars",
    "LAKEHOUSE_DAGSTER_HOME": "/srv/dagster", "LAKEHOUSE_LOG_DIR": "/var/log/lakehouse",
    "LAKEHOUSE_MAVEN_SETTINGS": "/etc/maven/settings.xml", "LAKEHOUSE_KAFKA_BOOTSTRAP": "b1:9092,b2:9092",
    "LAKEHOUSE_KAFKA_HOST": "10.0.0.5", "LAKEHOUSE_KAFKA_PORT": "12345", "LAKEHOUSE_KAFKA_CONTROLLER_PORT": "12346",
    "LAKEHOUSE_POSTGRES_PORT": "15432", "LAKEHOUSE_POSTGRES_BIN": "/usr/lib/postgresql/15/bin", "LAKEHOUSE_CDC_PORT": "18083",
    "LAKEHOUSE_KAFKA_HEAP": "1g", "LAKEHOUSE_KAFKA_REPLICATION_FACTOR": "3", "LAKEHOUSE_KAFKA_NODES": "3", "LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS": "50", "LAKEHOUSE_SPARK_MASTER": "spark://h:7077",
    "LAKEHOUSE_SPARK_DRIVER_MEMORY": "4g", "LAKEHOUSE_SPARK_JAVA_OPTIONS": "-XX:+UseG1GC -Xss4m",
    "LAKEHOUSE_SPARK_CLASS_ARCHIVE": "false", "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS": "200", "LAKEHOUSE_SPARK_UI": "true",
    "LAKEHOUSE_SPARK_CONF": "spark.k=v", "LAKEHOUSE_S3_ENDPOINT": "http://127.0.0.1:9000", "LAKEHOUSE_S3_REGION": "eu-west-1",
    "LAKEHOUSE_S3_PATH_STYLE": "True", "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER": "500",
    "LAKEHOUSE_MAX_BYTES_PER_TRIGGER": "1g", "LAKEHOUSE_CATCH_UP_PARALLEL": "1",
    "LAKEHOUSE_CATCH_UP_ONE_QUERY_PER_TOPIC": "False",
    "LAKEHOUSE_SILVER_DEDUP_WATERMARK": "2 hours", "LAKEHOUSE_GOLD_WATERMARK": "5 minutes",
    "LAKEHOUSE_EVENT_TIME_MAX_AHEAD": "12 hours", "LAKEHOUSE_EVENT_TIME_FLOOR": "2020-01-01T00:00:00Z",
    "LAKEHOUSE_GOLD_WATERMARKS": "gold_sessions=1 hour", "LAKEHOUSE_PIPELINE": "my_company.pipelines.sensors",
    "LAKEHOUSE_REPLAY_WINDOW": "14 days", "LAKEHOUSE_MAINTENANCE_CRON": "30 4 * * *",
    "LAKEHOUSE_QUALITY": "False", "LAKEHOUSE_QUALITY_DIR": "/srv/lakehouse/gx", "LAKEHOUSE_QUALITY_DOCS_KEEP": "5",
    "LAKEHOUSE_STREAM_TRIGGER": "5 seconds", "LAKEHOUSE_STREAM_REPORT_EVERY": "10 seconds", "LAKEHOUSE_AUTO_COMPACT": "true",
    "LAKEHOUSE_STREAM_TRIGGERS": "gold=10 seconds;bronze_orders=2 seconds", "LAKEHOUSE_SERVE_WARM_UP": "False",
    "LAKEHOUSE_STREAM_FRESHNESS": "5 minutes", "LAKEHOUSE_STREAM_LAG_LIMIT": "5000", "LAKEHOUSE_STREAM_MAX_RESTARTS": "3", "LAKEHOUSE_STREAM_ONE_QUERY_PER_TOPIC": "True",
}


def test_every_described_variable_is_read_by_from_env():
    """Each variable describe() lists is honoured by from_env (set it, see it on the settings)."""
    assert {name for name, _, _ in Settings.describe()} == set(SAMPLES)
    for name, value in SAMPLES.items():
        attr = name.removeprefix("LAKEHOUSE_").lower()
        got = getattr(Settings.from_env({"LAKEHOUSE_HOME": HOME, name: value}), attr)
        shown = ";".join(f"{k}={v}" for k, v in got.items()) if isinstance(got, dict) else str(got)
        assert shown.lower() == value.lower(), name


@pytest.mark.parametrize(
    "variable, value, allowed",
    [
        ("LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS", "-1", "from 1 to"),
        ("LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS", "0", "from 1 to"),
        ("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", "-5", "from 0 (no cap) to"),
        ("LAKEHOUSE_MAX_BYTES_PER_TRIGGER", "128", "such as 128m"),
        ("LAKEHOUSE_MAX_BYTES_PER_TRIGGER", "-1g", "such as 128m"),
        ("LAKEHOUSE_MAX_BYTES_PER_TRIGGER", "99999999999999g", "up to 6 digits"),
        ("LAKEHOUSE_KAFKA_REPLICATION_FACTOR", "-1", "from 0 (follow the cluster) to"),
        ("LAKEHOUSE_KAFKA_REPLICATION_FACTOR", "1.5", "integer"),
        ("LAKEHOUSE_KAFKA_FETCH_MAX_WAIT_MS", "-1", "from 0 to 60000"),
        ("LAKEHOUSE_SPARK_UI", "maybe", "true, false, yes, no, 1 or 0"),
        ("LAKEHOUSE_SPARK_UI", "on", "true, false, yes, no, 1 or 0"),
        ("LAKEHOUSE_GOLD_WATERMARK", "banana", "Spark interval"),
        ("LAKEHOUSE_GOLD_WATERMARK", "10", "Spark interval"),
        ("LAKEHOUSE_GOLD_WATERMARK", "-10 minutes", "Spark interval"),
        ("LAKEHOUSE_GOLD_WATERMARK", "0 minutes", "Spark interval"),
        ("LAKEHOUSE_SILVER_DEDUP_WATERMARK", "1 fortnight", "Spark interval"),
        ("LAKEHOUSE_REPLAY_WINDOW", "30 minutes", "at least 1 hour"),
        ("LAKEHOUSE_EVENT_TIME_MAX_AHEAD", "1 day;DROP", "Spark interval"),
        ("LAKEHOUSE_EVENT_TIME_FLOOR", "yesterday", "ISO-8601 instant"),
        ("LAKEHOUSE_EVENT_TIME_FLOOR", "2000-01-01T00:00:00", "with a zone"),
        ("LAKEHOUSE_KAFKA_HEAP", "lots", "512m or 2g"),
        ("LAKEHOUSE_SPARK_DRIVER_MEMORY", "2", "512m or 2g"),
        ("LAKEHOUSE_SPARK_DRIVER_MEMORY", "-2g", "512m or 2g"),
        ("LAKEHOUSE_SPARK_JAVA_OPTIONS", "UseParallelGC", "each starting with '-'"),
        ("LAKEHOUSE_SPARK_JAVA_OPTIONS", "-Xss4m; rm", "each starting with '-'"),
        ("LAKEHOUSE_SPARK_MASTER", "local[0]", "local[N]"),
        ("LAKEHOUSE_SPARK_MASTER", "spark://h", "spark://host:port"),
        ("LAKEHOUSE_SPARK_MASTER", "mesos://h:5050", "yarn or k8s://"),
        ("LAKEHOUSE_KAFKA_PORT", "70000", "from 1 to 65535"),
        ("LAKEHOUSE_KAFKA_CONTROLLER_PORT", "0", "from 1 to 65535"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", "b1:9092,b2", "host:port"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", "b1:99999", "ports 1-65535"),
        ("LAKEHOUSE_KAFKA_BOOTSTRAP", "b1:9092 b2:9092", "host:port"),
        ("LAKEHOUSE_KAFKA_HOST", "bad host", "host name"),
        ("LAKEHOUSE_SPARK_CONF", "shuffle.partitions=4", "spark.* keys"),
    ],
)
def test_a_bad_value_is_one_sentence_naming_variable_value_and_what_is_allowed(variable, value, allowed):
    """Each kind of bad value is refused by SettingsError: one line with the variable, the value and the rule."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_HOME": HOME, variable: value})
    message = str(caught.value)
    assert message.startswith(f"{variable}=") and allowed in message, message
    assert value.split("=")[0] in message
    assert "\n" not in message and message.endswith(".")


@pytest.mark.parametrize(
    "variable, value, parsed",
    [
        ("LAKEHOUSE_SPARK_UI", "YES", True), ("LAKEHOUSE_SPARK_UI", "0", False), ("LAKEHOUSE_SPARK_UI", "False", False),
        ("LAKEHOUSE_GOLD_WATERMARK", "1 hour 30 minutes", "1 hour 30 minutes"),
        ("LAKEHOUSE_GOLD_WATERMARK", "30 seconds", "30 seconds"), ("LAKEHOUSE_GOLD_WATERMARK", "2 days", "2 days"),
        ("LAKEHOUSE_SPARK_MASTER", "local", "local"), ("LAKEHOUSE_SPARK_MASTER", "local[4]", "local[4]"),
        ("LAKEHOUSE_SPARK_MASTER", "local[*]", "local[*]"), ("LAKEHOUSE_SPARK_MASTER", "local[4,2]", "local[4,2]"),
        ("LAKEHOUSE_SPARK_MASTER", "spark://a:7077,b:7077", "spark://a:7077,b:7077"),
        ("LAKEHOUSE_SPARK_MASTER", "yarn", "yarn"),
        ("LAKEHOUSE_SPARK_MASTER", "k8s://https://10.0.0.1:6443", "k8s://https://10.0.0.1:6443"),
        ("LAKEHOUSE_KAFKA_HEAP", "768M", "768M"), ("LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER", "0", 0),
        ("LAKEHOUSE_MAX_BYTES_PER_TRIGGER", "0", "0"), ("LAKEHOUSE_MAX_BYTES_PER_TRIGGER", "512K", "512K"),
        ("LAKEHOUSE_EVENT_TIME_FLOOR", "2010-06-01T00:00:00+02:00", "2010-06-01T00:00:00+02:00"),
    ],
)
def test_good_values_in_each_form_are_accepted(variable, value, parsed):
    """The allowed forms the messages promise are accepted as written."""
    attr = variable.removeprefix("LAKEHOUSE_").lower()
    assert getattr(Settings.from_env({"LAKEHOUSE_HOME": HOME, variable: value}), attr) == parsed


@pytest.mark.parametrize(
    "overrides, variable",
    [
        ({"spark_shuffle_partitions": -1}, "LAKEHOUSE_SPARK_SHUFFLE_PARTITIONS"),
        ({"spark_ui": "maybe"}, "LAKEHOUSE_SPARK_UI"),
        ({"gold_watermark": "banana"}, "LAKEHOUSE_GOLD_WATERMARK"),
        ({"max_offsets_per_trigger": True}, "LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER"),
        ({"spark_conf": {"spark.hadoop.fs.s3a.secret.key": 42}}, "LAKEHOUSE_SPARK_CONF"),
        ({"home": ""}, "LAKEHOUSE_HOME"),
    ],
)
def test_settings_built_in_code_are_checked_too(overrides, variable):
    """Settings(...) constructed directly (tests, Dagster resources) is validated like the environment."""
    with pytest.raises(SettingsError, match=variable):
        Settings(**{"home": HOME, **overrides})


def test_defaults_are_valid_and_the_new_event_time_settings_have_their_defaults():
    """The defaults pass validation, and the event-time plausibility settings default to 1 day and 2000-01-01."""
    s = Settings(home=HOME)
    assert (s.event_time_max_ahead, s.event_time_floor) == ("1 day", "2000-01-01T00:00:00Z")


def test_secret_spark_settings_never_show_in_repr_or_errors():
    """repr(settings) (what a log line or trace prints) masks secret Spark values; spark_conf keeps them for Spark."""
    s = Settings(home=HOME, spark_conf={"spark.hadoop.fs.s3a.secret.key": "s3cr3t", "spark.app.tag": "visible"})
    assert s.spark_conf["spark.hadoop.fs.s3a.secret.key"] == "s3cr3t"
    assert "s3cr3t" not in repr(s) and "****" in repr(s) and "visible" in repr(s)
    assert s.shown("spark_conf") == "spark.hadoop.fs.s3a.secret.key=****;spark.app.tag=visible"
    with pytest.raises(SettingsError) as caught:
        Settings(home=HOME, spark_conf={"spark.x.password": "pa55", "fs.bad.key": "k3y"})
    assert "pa55" not in str(caught.value) and "k3y" not in str(caught.value)


def test_spark_keeps_little_status_history_when_no_ui_shows_it(tmp_path):
    """Without the web UI the driver keeps a few executions, jobs, stages and tasks; with it, Spark's own defaults;
    LAKEHOUSE_SPARK_CONF still sets any of them."""
    from tests.unit.test_s3_settings import _classpath, conf as spark_conf_of

    _classpath(tmp_path / "jars", "spark", ("delta-spark_2.13-4.4.0.jar",))
    conf = lambda **given: spark_conf_of(tmp_path / "jars", **given)    # noqa: E731
    quiet = conf()
    assert int(quiet["spark.sql.ui.retainedExecutions"]) <= 50 and int(quiet["spark.ui.retainedTasks"]) <= 10_000
    assert int(quiet["spark.ui.retainedJobs"]) <= 100 and int(quiet["spark.ui.retainedStages"]) <= 100
    shown = conf(spark_ui=True)
    assert shown["spark.ui.enabled"] == "true" and not any(".retained" in key for key in shown)
    mine = conf(spark_conf={"spark.sql.ui.retainedExecutions": "500"})
    assert mine["spark.sql.ui.retainedExecutions"] == "500"
