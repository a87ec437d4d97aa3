"""Settings read from LAKEHOUSE_* variables: derived defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import dataclasses

import pytest

from infra.settings import Settings, SettingsError

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
    """LAKEHOUSE_SPARK_CONF 'a=b;c=d' becomes {'a': 'b', 'c': 'd'}, with spaces and empty items ignored."""
    assert Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_SPARK_CONF": "a=b;c=d"}).spark_conf == {"a": "b", "c": "d"}
    s = Settings.from_env({
        "LAKEHOUSE_HOME": HOME,
        "LAKEHOUSE_SPARK_CONF": " spark.x = 1 ;; spark.hadoop.fs.s3a.endpoint=http://h:9000/?a=b ;",
    })
    assert s.spark_conf == {"spark.x": "1", "spark.hadoop.fs.s3a.endpoint": "http://h:9000/?a=b"}


def test_spark_conf_item_without_equals_raises_settings_error():
    """An item without '=' in LAKEHOUSE_SPARK_CONF raises SettingsError naming the variable and the item."""
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_HOME": HOME, "LAKEHOUSE_SPARK_CONF": "a=b;oops"})
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


def test_every_described_variable_is_read_by_from_env():
    """Each variable describe() lists is honoured by from_env (set it, see it on the settings)."""
    samples = {int: "12345", bool: "true", str: "x-value"}
    for name, _, _ in Settings.describe():
        attr = name.removeprefix("LAKEHOUSE_").lower()
        if attr == "spark_conf":
            assert Settings.from_env({name: "k=v"}).spark_conf == {"k": "v"}
            continue
        kind = type(getattr(Settings(home=HOME), attr))
        value = samples[kind]
        if attr == "kafka_controller_port":
            value = "12346"
        got = getattr(Settings.from_env({"LAKEHOUSE_HOME": HOME, name: value}), attr)
        assert str(got).lower() == value, name
