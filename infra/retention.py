"""One retention policy: everything the lake keeps follows from the replay window (LAKEHOUSE_REPLAY_WINDOW).

- Kafka topics keep records at least the window (a topic spec's own longer retention wins).
- Delta tables keep the files a commit removed (`delta.deletedFileRetentionDuration`, what VACUUM obeys)
  and their log (`delta.logRetentionDuration`, how far time travel and a stopped stream reach back) for
  the window. Both are table defaults of the Spark session, so every table is created with them and no
  later ALTER is needed (a metadata commit stops the streams that read a table).
- Stream checkpoints keep Spark's default of the last 100 batches (`spark.sql.streaming.minBatchesToRetain`):
  a checkpoint holds source positions, not data, so what a stopped stream needs to resume is that the data
  at those positions is still kept, which the three settings above guarantee for the window.

This module holds the arithmetic and the decisions (pure, no I/O); `batch.maintenance` reads the live
values and `lakehouse doctor` and the Dagster checks report what it decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

SECOND_MS = 1000
HOUR_MS = 3600 * SECOND_MS
DAY_MS = 24 * HOUR_MS
MIN_WINDOW_MS = HOUR_MS       # shorter, and VACUUM could delete files a running micro-batch has not committed yet

DELETED_FILES = "delta.deletedFileRetentionDuration"
LOG = "delta.logRetentionDuration"
# What Delta uses when a table does not set them.
DELTA_DEFAULTS = {DELETED_FILES: "interval 1 week", LOG: "interval 30 days"}
SESSION_DEFAULT = "spark.databricks.delta.properties.defaults."   # + the property without "delta."

_UNIT_MS = {
    "microsecond": 0.001, "millisecond": 1, "second": SECOND_MS, "minute": 60 * SECOND_MS, "hour": HOUR_MS,
    "day": DAY_MS, "week": 7 * DAY_MS,
}
_PART = re.compile(r"\s*(\d+)\s*(microsecond|millisecond|second|minute|hour|day|week)s?\s*", re.I)


def duration_ms(text: str) -> int:
    """Milliseconds in an interval such as "7 days", "1 day 12 hours" or Delta's "interval 1 week"."""
    body = re.sub(r"^\s*interval\s+", "", str(text), flags=re.I)
    parts = _PART.findall(body)
    if not parts or _PART.sub("", body).strip():
        raise ValueError(f"{text!r} is not an interval such as '7 days' or 'interval 1 week'")
    return int(sum(int(n) * _UNIT_MS[unit.lower()] for n, unit in parts))


def shown(ms: int) -> str:
    """A duration in the largest unit that divides it: 604800000 -> "7 days"."""
    if ms < 0:
        return "forever"
    for unit, size in (("day", DAY_MS), ("hour", HOUR_MS), ("minute", 60 * SECOND_MS), ("second", SECOND_MS)):
        if ms and ms % size == 0:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms} ms"


def table_defaults(window: str) -> dict[str, str]:
    """Spark session settings that create every Delta table with the window as its two retentions."""
    return {SESSION_DEFAULT + key.removeprefix("delta."): f"interval {window}" for key in (DELETED_FILES, LOG)}


@dataclass(frozen=True)
class Finding:
    """One retention a topic or table has, compared with the window; `problem` says how to fix a failure."""

    kind: str          # "topic", "table" or "new tables"
    name: str
    setting: str
    live: str
    needed: str
    status: str        # "ok", "FAIL", or "absent" (nothing to check yet)
    problem: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"


def _alter_topic(bootstrap: str, name: str, what: str) -> str:
    return (f"`kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics --entity-name {name} "
            f"{what}`")


def check_topic(name: str, config: Mapping[str, str] | None, window_ms: int, bootstrap: str) -> list[Finding]:
    """A live topic's retention against the window; `config` None means the topic does not exist yet."""
    needed = f">= {shown(window_ms)}"
    if config is None:
        return [Finding("topic", name, "retention.ms", "-", needed, "absent")]
    policy = {p.strip() for p in str(config.get("cleanup.policy", "delete")).split(",")}
    if "delete" not in policy:
        # A compacted changelog deletes nothing by time: it keeps the newest value of every key for good.
        return [Finding("topic", name, "retention.ms", "compacted (newest value per key, kept)", needed, "ok")]
    findings = []
    raw = str(config.get("retention.ms", "604800000"))
    try:
        ms = int(raw)
    except ValueError:
        ms = None
    if ms is None or (0 <= ms < window_ms):
        live = raw if ms is None else shown(ms)
        findings.append(Finding(
            "topic", name, "retention.ms", live, needed, "FAIL",
            f"Topic {name} deletes records after {live}, before the replay window of {shown(window_ms)} ends: raise it "
            f"with {_alter_topic(bootstrap, name, f'--add-config retention.ms={window_ms}')} (the broker applies it "
            "at once; running streams are not disturbed).",
        ))
    else:
        findings.append(Finding("topic", name, "retention.ms", shown(ms), needed, "ok"))
    size = str(config.get("retention.bytes", "-1"))
    if size not in ("-1", "None", ""):
        findings.append(Finding(
            "topic", name, "retention.bytes", size, "-1 (no size limit)", "FAIL",
            f"Topic {name} also deletes by size (retention.bytes={size}), which can drop records younger than the "
            f"replay window: remove the limit with {_alter_topic(bootstrap, name, '--delete-config retention.bytes')}.",
        ))
    return findings


_WHAT = {
    DELETED_FILES: "lets VACUUM delete the files a commit removed",
    LOG: "keeps its log (time travel, where a stopped stream resumes)",
}


def check_table(name: str, path: str, properties: Mapping[str, str] | None, window: str) -> list[Finding]:
    """A table's two retentions against the window; `properties` None means the table does not exist yet."""
    window_ms = duration_ms(window)
    needed = f">= {shown(window_ms)}"
    if properties is None:
        return [Finding("table", name, key, "-", needed, "absent") for key in (DELETED_FILES, LOG)]
    findings = []
    for key in (DELETED_FILES, LOG):
        raw = properties.get(key)
        value = raw if raw is not None else DELTA_DEFAULTS[key]
        live = value if raw is not None else f"{value} (Delta's default)"
        try:
            ms = duration_ms(value)
        except ValueError:
            ms = None
        if ms is not None and ms >= window_ms:
            findings.append(Finding("table", name, key, live, needed, "ok"))
            continue
        after = value if ms is None else shown(ms)
        findings.append(Finding(
            "table", name, key, live, needed, "FAIL",
            f"Table {name} {_WHAT[key]} after {after}, less than the replay window of {shown(window_ms)}: run "
            f"`ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{key}' = 'interval {window}')` while no stream reads "
            "it (a metadata commit stops the streams reading the table; restart them afterwards)"
            + ("; until then the nightly VACUUM skips it." if key == DELETED_FILES else "."),
        ))
    return findings


def check_session_defaults(conf: Mapping[str, str], window: str) -> list[Finding]:
    """The table defaults the Spark session would create new tables with (an override in LAKEHOUSE_SPARK_CONF)."""
    window_ms = duration_ms(window)
    findings = []
    for key in (DELETED_FILES, LOG):
        conf_key = SESSION_DEFAULT + key.removeprefix("delta.")
        value = conf.get(conf_key, DELTA_DEFAULTS[key])
        try:
            ms = duration_ms(value)
        except ValueError:
            ms = None
        ok = ms is not None and ms >= window_ms
        findings.append(Finding(
            "new tables", "(session default)", key, value, f">= {shown(window_ms)}", "ok" if ok else "FAIL",
            "" if ok else (
                f"New tables would be created with {key} = {value}, less than the replay window of "
                f"{shown(window_ms)}: remove {conf_key} from LAKEHOUSE_SPARK_CONF (the session then uses the window)."
            ),
        ))
    return findings


def vacuum_blocker(name: str, properties: Mapping[str, str], window_ms: int) -> str | None:
    """Why VACUUM must not run on a table (its deleted-file retention is shorter than the window), or None.

    Delta 4.4 ignores a RETAIN shorter than the table's own `delta.deletedFileRetentionDuration` unless it is 0
    (`spark.databricks.delta.vacuum.retentionWindowIgnore.enabled`): the table property is the retention
    VACUUM uses, so a table whose property is shorter than the window is left alone instead.
    """
    value = properties.get(DELETED_FILES, DELTA_DEFAULTS[DELETED_FILES])
    try:
        ms = duration_ms(value)
    except ValueError:
        return f"{DELETED_FILES} = {value!r} cannot be read; see `lakehouse doctor`"
    if ms < window_ms:
        return (f"its {DELETED_FILES} ({value}) is shorter than the replay window ({shown(window_ms)}), so VACUUM "
                "would delete files inside the window; `lakehouse doctor` says how to fix it")
    return None
