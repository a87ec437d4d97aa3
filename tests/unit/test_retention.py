"""The retention policy's arithmetic and decisions: one replay window, and what covers it or not."""

from __future__ import annotations

import pytest

from lakehouse.infra.retention import (
    DAY_MS, DELETED_FILES, HOUR_MS, LOG, check_session_defaults, check_table, check_topic, duration_ms, shown,
    table_defaults, vacuum_blocker,
)
from lakehouse.infra.settings import Settings, SettingsError
from lakehouse.infra.spark import spark_conf
from lakehouse.schemas import topics
from lakehouse.pipelines import shop

WEEK = 7 * DAY_MS
BOOT = "127.0.0.1:9092"


@pytest.mark.parametrize("text, ms", [
    ("7 days", WEEK), ("interval 1 week", WEEK), ("INTERVAL 30 days", 30 * DAY_MS), ("1 day 12 hours", 36 * HOUR_MS),
    ("interval 168 hours", WEEK), ("90 minutes", 90 * 60_000), ("15 seconds", 15_000), ("500 milliseconds", 500),
])
def test_durations_in_delta_and_setting_forms_are_read(text, ms):
    """Delta's interval properties and the setting's Spark intervals come to the same milliseconds."""
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "7", "seven days", "7 fortnights", "interval", "7 days and more"])
def test_an_unreadable_duration_is_refused(text):
    with pytest.raises(ValueError):
        duration_ms(text)


def test_durations_are_shown_in_their_largest_whole_unit():
    assert (shown(WEEK), shown(HOUR_MS), shown(36 * HOUR_MS), shown(90_000), shown(1500), shown(-1)) == (
        "7 days", "1 hour", "36 hours", "90 seconds", "1500 ms", "forever")


def test_the_window_setting_defaults_to_7_days_and_refuses_less_than_an_hour():
    """LAKEHOUSE_REPLAY_WINDOW: 7 days by default; under an hour VACUUM could delete an uncommitted batch's files."""
    assert Settings.from_env({"LAKEHOUSE_HOME": "/h"}).replay_window == "7 days"
    assert Settings.from_env({"LAKEHOUSE_HOME": "/h", "LAKEHOUSE_REPLAY_WINDOW": "1 day 12 hours"}).replay_window \
        == "1 day 12 hours"
    for bad in ("30 minutes", "a week", "1 week"):
        with pytest.raises(SettingsError, match="LAKEHOUSE_REPLAY_WINDOW"):
            Settings.from_env({"LAKEHOUSE_HOME": "/h", "LAKEHOUSE_REPLAY_WINDOW": bad})


def test_the_maintenance_cron_must_have_five_fields():
    assert Settings.from_env({"LAKEHOUSE_HOME": "/h"}).maintenance_cron == "0 3 * * *"
    assert Settings(home="/h", maintenance_cron="*/30 1-5 * * MON-FRI").maintenance_cron == "*/30 1-5 * * MON-FRI"
    with pytest.raises(SettingsError, match="LAKEHOUSE_MAINTENANCE_CRON"):
        Settings.from_env({"LAKEHOUSE_HOME": "/h", "LAKEHOUSE_MAINTENANCE_CRON": "every night"})


def test_new_tables_get_the_window_as_both_retentions_from_the_session(tmp_path, jars_dir):
    """The Spark session creates every table with the window; an explicit LAKEHOUSE_SPARK_CONF entry wins."""
    assert table_defaults("14 days") == {
        "spark.databricks.delta.properties.defaults.deletedFileRetentionDuration": "interval 14 days",
        "spark.databricks.delta.properties.defaults.logRetentionDuration": "interval 14 days",
    }
    conf = spark_conf(Settings(home=str(tmp_path), jars_dir=jars_dir, replay_window="14 days"))
    assert conf["spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"] == "interval 14 days"
    assert conf["spark.databricks.delta.properties.defaults.logRetentionDuration"] == "interval 14 days"
    assert "spark.sql.streaming.minBatchesToRetain" not in conf   # Spark's default (100 batches) stays


def test_topics_keep_at_least_the_window_and_a_longer_spec_wins():
    spec = shop.PAGE_VIEWS.topic_spec      # 7 days in its spec
    assert spec.config()["retention.ms"] == str(WEEK)
    assert spec.config(14 * DAY_MS)["retention.ms"] == str(14 * DAY_MS)
    assert spec.config(DAY_MS)["retention.ms"] == str(WEEK)


def _failed(findings):
    return [(f.name, f.setting) for f in findings if f.failed]


def test_a_topic_shorter_than_the_window_fails_with_the_command_that_fixes_it():
    [f] = check_topic("shop.orders.v1", {"cleanup.policy": "delete", "retention.ms": str(HOUR_MS)}, WEEK, BOOT)
    assert f.failed and f.live == "1 hour" and f.needed == ">= 7 days"
    assert "shop.orders.v1" in f.problem and f"retention.ms={WEEK}" in f.problem and "kafka-configs.sh" in f.problem
    assert "\n" not in f.problem


def test_topic_retention_that_covers_the_window_passes():
    assert _failed(check_topic("t", {"cleanup.policy": "delete", "retention.ms": str(WEEK)}, WEEK, BOOT)) == []
    assert _failed(check_topic("t", {"cleanup.policy": "delete", "retention.ms": "-1"}, WEEK, BOOT)) == []
    # A compacted changelog deletes nothing by time, whatever its retention.ms says.
    assert _failed(check_topic("t", {"cleanup.policy": "compact", "retention.ms": "1000"}, WEEK, BOOT)) == []
    assert _failed(check_topic("t", {"cleanup.policy": "compact,delete", "retention.ms": "1000"}, WEEK, BOOT)) == [
        ("t", "retention.ms")]


def test_a_size_limit_on_a_topic_fails_as_it_can_cut_into_the_window():
    findings = check_topic("t", {"cleanup.policy": "delete", "retention.ms": str(WEEK), "retention.bytes": "1048576"},
                           WEEK, BOOT)
    assert _failed(findings) == [("t", "retention.bytes")]
    assert "--delete-config retention.bytes" in findings[1].problem


def test_a_missing_topic_or_table_is_absent_not_failed():
    assert [f.status for f in check_topic("t", None, WEEK, BOOT)] == ["absent"]
    assert [f.status for f in check_table("gold_x", "/lake/gold/gold_x", None, "7 days")] == ["absent", "absent"]


def test_table_without_properties_is_judged_by_deltas_defaults():
    """No property: Delta keeps removed files 1 week and its log 30 days; that covers 7 days, not 14."""
    assert _failed(check_table("t", "/p", {}, "7 days")) == []
    assert _failed(check_table("t", "/p", {}, "14 days")) == [("t", DELETED_FILES)]
    assert "(Delta's default)" in check_table("t", "/p", {}, "7 days")[0].live


def test_a_short_table_retention_fails_with_the_alter_statement_and_the_warning_about_readers():
    findings = check_table("gold_sessions", "/lake/gold/gold_sessions",
                           {DELETED_FILES: "interval 1 hour", LOG: "interval 7 days"}, "7 days")
    assert _failed(findings) == [("gold_sessions", DELETED_FILES)]
    problem = findings[0].problem
    assert "ALTER TABLE delta.`/lake/gold/gold_sessions` SET TBLPROPERTIES" in problem
    assert f"'{DELETED_FILES}' = 'interval 7 days'" in problem
    assert "stops the streams" in problem and "VACUUM skips it" in problem
    log_short = check_table("t", "/p", {DELETED_FILES: "interval 7 days", LOG: "interval 2 days"}, "7 days")
    assert _failed(log_short) == [("t", LOG)] and "time travel" in log_short[1].problem


def test_an_unreadable_table_retention_fails():
    assert _failed(check_table("t", "/p", {DELETED_FILES: "soon"}, "7 days")) == [("t", DELETED_FILES)]


def test_session_defaults_overridden_shorter_fail():
    key = "spark.databricks.delta.properties.defaults.logRetentionDuration"
    ok = check_session_defaults(table_defaults("7 days"), "7 days")
    assert _failed(ok) == []
    short = check_session_defaults({**table_defaults("7 days"), key: "interval 1 day"}, "7 days")
    assert _failed(short) == [("(session default)", LOG)] and key in short[1].problem


def test_vacuum_is_blocked_only_when_the_tables_retention_is_shorter_than_the_window():
    assert vacuum_blocker("t", {DELETED_FILES: "interval 7 days"}, WEEK) is None
    assert vacuum_blocker("t", {}, WEEK) is None                           # Delta's 1 week
    assert vacuum_blocker("t", {}, 14 * DAY_MS) is not None
    assert "shorter than the replay window" in vacuum_blocker("t", {DELETED_FILES: "interval 1 hour"}, WEEK)
