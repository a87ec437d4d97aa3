"""One settings object, read once from `LAKEHOUSE_*` environment variables and passed down explicitly."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from lakehouse.infra.retention import MIN_WINDOW_MS, duration_ms
from lakehouse.infra.profiles import PROFILES

PREFIX = "LAKEHOUSE_"


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message says which and how to fix it."""


def _project_root() -> Path | None:
    # An editable install (the README's way) keeps the packages inside the checkout.
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() else None


def _default_home() -> str:
    root = _project_root()
    return str((root / ".lakehouse") if root else (Path.home() / ".lakehouse"))


def _parse_conf(text: str) -> dict[str, str]:
    """Parse `key=value;key=value` (extra Spark settings) into a dict."""
    try:
        return _parse_pairs(text)
    except ValueError as item:
        raise SettingsError(
            f"LAKEHOUSE_SPARK_CONF item {str(item)!r} has no '='; write it as key=value;key=value."
        ) from None


_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _parse_bool(text: str) -> bool:
    try:
        return _BOOLEANS[text.strip().lower()]
    except KeyError:
        raise ValueError(text) from None


def parse_instant(text: str) -> datetime:
    """An ISO-8601 instant with a zone (Z or an offset), e.g. 2000-01-01T00:00:00Z."""
    ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError(f"{text!r} has no zone")
    return ts


@dataclass(frozen=True)
class Rule:
    """How a setting's text becomes a value, and which values it allows (told to the user when refused)."""

    allowed: str
    parse: Callable[[str], Any] = str.strip
    check: Callable[[Any], bool] = lambda value: True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(low: int, high: int, note: str = "") -> Rule:
    return Rule(f"use an integer from {low}{note} to {high}", int, lambda v: _is_int(v) and low <= v <= high)


def _matching(pattern: str, allowed: str, flags: int = 0) -> Rule:
    regex = re.compile(pattern, flags)
    return Rule(allowed, check=lambda v: isinstance(v, str) and regex.fullmatch(v) is not None)


_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]"
_PORT = r"(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]\d{4}|[1-9]\d{0,3})"  # 1-65535
_HOST_PORTS = rf"(?:{_HOST}):{_PORT}(?:,(?:{_HOST}):{_PORT})*"
_DURATION_PART = r"[1-9]\d* (?:second|minute|hour|day)s?"


def _is_instant(value: Any) -> bool:
    try:
        parse_instant(value)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def _is_conf(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and k.startswith("spark.") and isinstance(v, str) for k, v in value.items()
    )


def _parse_pairs(text: str) -> dict[str, str]:
    """`name=value;name=value` into a dict (values keep their inner spaces)."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        if "=" not in item:
            raise ValueError(item)
        key, value = item.split("=", 1)
        pairs[key.strip()] = value.strip()
    return pairs


def _is_watermarks(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and re.fullmatch(r"gold_\w+", k) and DURATION.check(v)
        for k, v in value.items()
    )


def _is_triggers(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and re.fullmatch(r"\w+", k) and DURATION.check(v) for k, v in value.items())


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and not any(c in value for c in "\0\n")


PATH = Rule("use a folder or file path", check=lambda v: _is_path(v) and v != "")
OPTIONAL_PATH = Rule("use a file path, or nothing for the default", check=_is_path)
PORT = _integer(1, 65535)
BOOLEAN = Rule("use true, false, yes, no, 1 or 0", _parse_bool, lambda v: isinstance(v, bool))
DURATION = _matching(rf"{_DURATION_PART}(?: {_DURATION_PART})*",
                     'use a Spark interval such as "30 seconds", "10 minutes", "1 hour" or "1 day 12 hours"', re.I)
JAVA_OPTIONS = _matching(r"-\S+(?:\s+-\S+)*", "use JVM options, each starting with '-', separated by spaces")
MEMORY = _matching(r"[1-9]\d*[kmgt]", "use a size such as 512m or 2g (k, m, g or t)", re.I)


def memory_bytes(size: str) -> int:
    """Bytes of a JVM memory size that MEMORY allows, such as 512m or 2g."""
    return int(size[:-1]) * {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[size[-1].lower()]
# At most six digits: Delta parses the size into a long and refuses one that overflows it when the stream starts.
BYTES_OR_ZERO = _matching(r"0|[1-9]\d{0,5}[kmgt]", "use a size such as 128m or 1g (k, m, g or t, up to 6 digits), or 0",
                          re.I)
INSTANT = Rule("use an ISO-8601 instant with a zone such as 2000-01-01T00:00:00Z", check=_is_instant)
SPARK_MASTER = _matching(
    rf"local|local\[(?:\*|[1-9]\d*)(?:,[1-9]\d*)?\]|spark://{_HOST_PORTS}|yarn|k8s://\S+",
    "use local, local[N], local[*], local[N,M], spark://host:port[,host:port], yarn or k8s://<api server>",
)
BOOTSTRAP = _matching(_HOST_PORTS, "use host:port or a comma list of them, ports 1-65535")
HOST = _matching(_HOST, "use a host name or an IP address")
WATERMARKS = Rule(
    'write it as flow=duration;flow=duration, e.g. "gold_sessions=1 hour;gold_joined=45 minutes"',
    _parse_pairs, _is_watermarks)
TRIGGER = _matching(rf"auto|{_DURATION_PART}(?: {_DURATION_PART})*",
                    'use auto, or a Spark interval such as "1 second" or "30 seconds"', re.I)
TRIGGERS = Rule(
    'write it as name=duration;name=duration with a layer (bronze, silver, gold) or a flow as the name, '
    'e.g. "gold=5 seconds;bronze_clicks=2 seconds"', _parse_pairs, _is_triggers)
SPARK_CONF = Rule("write it as key=value;key=value with spark.* keys", _parse_conf, _is_conf)
REPLAY_WINDOW = Rule(
    'use a Spark interval of at least 1 hour such as "7 days" or "1 day 12 hours"',
    check=lambda v: DURATION.check(v) and duration_ms(v) >= MIN_WINDOW_MS)
S3_ENDPOINT = _matching(rf"(?:https?://(?:{_HOST})(?::{_PORT})?/?)?",
                        "use http(s)://host[:port], e.g. http://127.0.0.1:9000, or nothing for AWS S3")
S3_REGION = _matching(r"(?:[a-z0-9][a-z0-9-]*)?", "use a region name such as us-east-1, or nothing")
CRON = _matching(r"[\w*/,?#LW-]+(?: [\w*/,?#LW-]+){4}",
                 'use a five-field cron expression such as "0 3 * * *" (minute hour day month weekday, UTC)')


def _setting(default: Any, help: str, rule: Rule) -> Any:
    meta = {"help": help, "rule": rule}
    if callable(default):  # a factory: the home folder, or an empty dict
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


# Settings whose default follows from another one (shown this way in --help and the README).
_DERIVED = {
    "lake_root": "<home>/lake",
    "jars_dir": "<home>/jars",
    "dagster_home": "<home>/dagster",
    "log_dir": "<home>/logs",
    "quality_dir": "<home>/quality",
    "kafka_bootstrap": "<kafka_host>:<kafka_port> of every node",
    "maven_settings": "infra/maven/settings.xml",
}


# Words in a Spark setting's key that mark its value as a secret (object-store keys, passwords, tokens).
SECRET_WORDS = ("password", "secret", "key", "token", "credential")
MASK = "****"


def is_secret(key: str) -> bool:
    """Whether a setting's key names a secret, so its value is never shown or logged."""
    return any(word in key.lower() for word in SECRET_WORDS)


def masked(conf: Mapping[str, str]) -> dict[str, str]:
    """The Spark settings with the values of secret keys replaced by ****."""
    return {k: MASK if is_secret(k) else v for k, v in conf.items()}


def _variable(name: str) -> str:
    return PREFIX + name.upper()


def _shown(value: Any) -> str:
    """A value as an error message quotes it (Spark settings by key only: values may be secrets)."""
    if isinstance(value, Mapping):
        return repr(";".join(f"{k}=..." for k in value))
    return repr(value)


def _check(f: dataclasses.Field, value: Any) -> None:
    rule: Rule = f.metadata["rule"]
    if not rule.check(value):
        raise SettingsError(f"{_variable(f.name)}={_shown(value)} is not valid; {rule.allowed}.")


@dataclass(frozen=True)
class Settings:
    """Every address, path and size the lakehouse uses; defaults run everything on one machine."""

    profile: str = _setting(
        "local", "The set-up the other defaults are for: local (one machine: local Spark, one Kafka node, a lake "
        "folder) or cluster (a Spark standalone master, three Kafka nodes, a lake on an S3 endpoint; "
        "`lakehouse settings --profile cluster` lists its values). A variable that is set wins over its profile.",
        Rule("use local or cluster", check=lambda v: v in PROFILES))
    pipeline: str = _setting(
        "lakehouse.pipelines.shop", "The pipeline package the engine runs: a module path, installed or on "
        "PYTHONPATH, whose PIPELINE declares its sources, gold tables and parameters (the shop by default).",
        _matching(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", "use a Python module path such as my_company.pipelines.sensors"))
    home: str = _setting(_default_home, "State folder: jars, broker data, lake, Dagster home, logs.", PATH)
    lake_root: str = _setting("", "Root of all Delta tables: a folder or an object-store URI (s3a://...).", PATH)
    jars_dir: str = _setting("", "Where Maven puts the JVM jars.", PATH)
    dagster_home: str = _setting("", "DAGSTER_HOME for the UI and daemon.", PATH)
    log_dir: str = _setting("", "Logs of the broker, Spark and the main job.", PATH)
    maven_settings: str = _setting("", "Maven settings file for `lakehouse setup` (e.g. a company mirror).", OPTIONAL_PATH)

    kafka_bootstrap: str = _setting("", "Kafka bootstrap servers the pipeline uses.", BOOTSTRAP)
    kafka_host: str = _setting("127.0.0.1", "Address the embedded broker listens on.", HOST)
    kafka_port: int = _setting(9092, "Client port of the embedded broker.", PORT)
    kafka_controller_port: int = _setting(9093, "KRaft controller port of the embedded broker.", PORT)
    kafka_heap: str = _setting("512m", "JVM heap of the embedded broker.", MEMORY)
    kafka_replication_factor: int = _setting(
        0, "Replication factor for new topics; 0 follows the cluster (its default.replication.factor: 3 with "
        "min.insync.replicas 2 on the embedded three-node Kafka, 1 on one node).",
        _integer(0, 32767, " (follow the cluster)"))
    kafka_nodes: int = _setting(
        1, "Nodes of the embedded Kafka, each a broker and a KRaft controller (3 survive the loss of one). Node i "
        "listens on LAKEHOUSE_KAFKA_PORT + 2(i-1) and LAKEHOUSE_KAFKA_CONTROLLER_PORT + 2(i-1); the default "
        "bootstrap lists every node.", _integer(1, 9))
    kafka_fetch_max_wait_ms: int = _setting(
        10, "How long the broker may hold a Spark read's fetch that finds no more records (Kafka's "
        "fetch.max.wait.ms, 500 by default). Spark reads known offset ranges, and each read task ended with one "
        "such wait: a task of a small micro-batch took 0.6 s instead of 0.1 s.", _integer(0, 60_000))

    postgres_port: int = _setting(
        5432, "Port of the operational database `lakehouse postgres start` runs on 127.0.0.1 (a pipeline's "
        "PostgreSQL, whose changes `lakehouse cdc` captures).", PORT)
    cdc_port: int = _setting(
        8083, "REST port of the Kafka Connect worker that `lakehouse cdc start` runs (Debezium's capture of the "
        "operational database), on 127.0.0.1.", PORT)
    postgres_bin: str = _setting(
        "", "Folder of PostgreSQL's server programs (initdb, pg_ctl, postgres); empty finds pg_ctl on PATH, else "
        "the newest /usr/lib/postgresql/<version>/bin.", OPTIONAL_PATH)

    spark_master: str = _setting("local[*]", "Spark master: local[*] or spark://host:7077.", SPARK_MASTER)
    spark_driver_memory: str = _setting("2g", "Spark driver memory.", MEMORY)
    spark_java_options: str = _setting(
        "-XX:+UseParallelGC", "JVM options of the Spark driver (a local master's tasks run in it too), beside the "
        "project's logging options. The default collector gives more throughput than G1 on few cores; "
        "-XX:+UseG1GC gives shorter pauses.", JAVA_OPTIONS)
    spark_class_archive: bool = _setting(
        True, "Start each Spark driver JVM from the class archive that `lakehouse setup` builds beside the jars "
        "(about 4 s sooner per start); false neither builds nor uses it.", BOOLEAN)
    spark_shuffle_partitions: int = _setting(
        4, "spark.sql.shuffle.partitions (small on one machine).", _integer(1, 100000))
    spark_ui: bool = _setting(False, "Start the Spark web UI (port 4040) with each session.", BOOLEAN)
    spark_conf: Mapping[str, str] = _setting(
        dict, "Extra Spark settings, key=value;key=value (e.g. spark.hadoop.fs.s3a.endpoint=...).", SPARK_CONF)
    # A lake on an s3a:// URI (AWS S3 or an S3-compatible store). The keys come only from AWS_ACCESS_KEY_ID and
    # AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) in the environment, never from a setting.
    s3_endpoint: str = _setting(
        "", "S3 endpoint of an s3a:// lake: empty for AWS S3 (found from the region), or the URL of an S3-compatible "
        "store such as http://127.0.0.1:9000 (`lakehouse s3 start` serves one for tests).", S3_ENDPOINT)
    s3_region: str = _setting(
        "", "Region of the lake's bucket (e.g. eu-west-1); empty lets S3A find it (us-east-1 for an S3-compatible "
        "store when an endpoint is set).", S3_REGION)
    s3_path_style: bool = _setting(
        False, "Address the bucket in the URL's path (http://host/bucket/key) instead of its host name: what most "
        "S3-compatible stores need.", BOOLEAN)

    max_offsets_per_trigger: int = _setting(
        500_000, "Cap on Kafka records per micro-batch, so a backlog of any size is caught up in bounded "
        "batches; 0 means no cap.", _integer(0, 1_000_000_000, " (no cap)"))
    max_bytes_per_trigger: str = _setting(
        "32m", "Soft cap on the Delta files a flow reading a table takes per micro-batch, so a backlog of any "
        "size is caught up in bounded batches; 0 means Delta's cap of 1000 files. A batch that ends inside a "
        "source commit holds the flow's watermark until the commit is read, so the cap changes the batches, "
        "not which events count as late.", BYTES_OR_ZERO)
    catch_up_parallel: int = _setting(
        3, "Flows a catch-up or `lakehouse verify` runs at once (those that do not read each other's tables); "
        "1 runs them one by one.",
        _integer(1, 64))
    catch_up_one_query_per_topic: bool = _setting(
        True, "A catch-up (`lakehouse run`, Dagster's catch_up) runs each topic's bronze and silver flows, and the "
        "tables that read only that silver table, as one query whenever their tables let one query take over "
        "(else as their own queries, which leaves them ready for the next run). Off: one query per flow.", BOOLEAN)
    silver_dedup_watermark: str = _setting("1 hour", "How long silver remembers event ids to drop duplicates.", DURATION)
    gold_watermark: str = _setting(
        "10 minutes", "How late an event may be and still count in a stateful gold flow (windows, sessions, joins); "
        "later events go to late_arrivals.", DURATION)
    gold_watermarks: Mapping[str, str] = _setting(
        dict, "Per-flow watermark delays that override LAKEHOUSE_GOLD_WATERMARK: flow=duration;flow=duration.",
        WATERMARKS)
    event_time_max_ahead: str = _setting(
        "1 day", "How far an event time may be ahead of the broker's append time before it is quarantined as implausible.",
        DURATION)
    event_time_floor: str = _setting(
        "2000-01-01T00:00:00Z", "Event times before this ISO-8601 instant are quarantined as implausible.", INSTANT)
    replay_window: str = _setting(
        "7 days", "How far back the lake can be replayed: topics keep records, VACUUM keeps removed files and Delta "
        "keeps its log (time travel) at least this long; `lakehouse doctor` checks it.", REPLAY_WINDOW)
    maintenance_cron: str = _setting(
        "0 3 * * *", "When the nightly compaction (OPTIMIZE) and VACUUM run: a cron expression in UTC.", CRON)
    stream_trigger: str = _setting(
        "auto", "How often `lakehouse stream` starts a micro-batch per flow (Spark's processing-time trigger): auto "
        "sizes each layer's trigger to the cores and the number of queries and logs what that sustains; a duration "
        "sets every flow's.", TRIGGER)
    stream_triggers: Mapping[str, str] = _setting(
        dict, "Triggers that override LAKEHOUSE_STREAM_TRIGGER for a layer (bronze, silver, gold) or a flow: "
        "name=duration;name=duration. A flow's own entry wins over its layer's; a slower layer leaves the "
        "driver's cores to the others.", TRIGGERS)
    stream_one_query_per_topic: bool = _setting(
        False, "`lakehouse stream` runs each topic's bronze and silver flows, and the tables that read only that "
        "silver table, as one query: each micro-batch reaches all of them in one batch. Off: one query per flow.",
        BOOLEAN)
    stream_report_every: str = _setting(
        "5 seconds", "How often `lakehouse stream` reports each table's progress to Dagster.", DURATION)
    stream_freshness: str = _setting(
        "2 minutes", "A table a running stream keeps fresh fails its freshness check when the stream has reported "
        "nothing of it for this long.",
        DURATION)
    stream_lag_limit: int = _setting(
        100_000, "Kafka records a flow may be behind its topic's end before its lag check fails.",
        _integer(0, 10**15))
    stream_max_restarts: int = _setting(
        5, "Failures in a row after which `lakehouse stream` stops a flow for good (and the command, with the reason).",
        _integer(0, 1000))
    auto_compact: bool = _setting(
        False, "Delta's auto compaction: the writer rewrites a table's small files right after its commit "
        "(dataChange=false, so streams reading the table skip it, and so do the flows' replay checks). Off by "
        "default until the suite passes with it on (docs/performance.md, \"Auto compaction\").",
        BOOLEAN)
    quality: bool = _setting(
        True, "Check every silver and gold batch against its table's expectation suite (quality/suites.py); "
        "false skips the checks (for measuring what they cost).", BOOLEAN)
    serve_warm_up: bool = _setting(
        True, "Have `lakehouse serve`, once it answers, run a few hundred demo events through silver, gold and a backfill "
        "on a scratch lake, so that the first run sent to it is not a cold one.", BOOLEAN)
    quality_dir: str = _setting(
        "", "Great Expectations' project folder: suites, validation results and the HTML Data Docs.", PATH)
    quality_docs_keep: int = _setting(
        20, "Validations per table that the Data Docs keep (the newest; older pages and GX results are deleted as "
        "new ones come); the table quality_results keeps every one.", _integer(1, 100_000))

    def __post_init__(self) -> None:
        home = self.home
        defaults = {
            "lake_root": f"{home}/lake",
            "jars_dir": f"{home}/jars",
            "dagster_home": f"{home}/dagster",
            "log_dir": f"{home}/logs",
            "quality_dir": f"{home}/quality",
            "kafka_bootstrap": ",".join(f"{self.kafka_host}:{self.kafka_port + 2 * i}" for i in range(self.kafka_nodes)),
        }
        unset = {name for name in defaults if not getattr(self, name)}
        # Check what was given before deriving the rest, so a bad port is named as such, not as a bad bootstrap.
        for f in dataclasses.fields(self):
            if f.name not in unset:
                _check(f, getattr(self, f.name))
        for name in unset:
            object.__setattr__(self, name, defaults[name])
        if self.kafka_port == self.kafka_controller_port:
            raise SettingsError(
                f"{PREFIX}KAFKA_PORT and {PREFIX}KAFKA_CONTROLLER_PORT are both {self.kafka_port}; give them different ports."
            )
        self.kafka_node_ports()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Read every `LAKEHOUSE_<NAME>` variable over its profile's values; explicit overrides win."""
        env = os.environ if environ is None else environ
        profile = (overrides.get("profile") or env.get(_variable("profile")) or "local").strip()
        if profile not in PROFILES:
            raise SettingsError(f"{_variable('profile')}={profile!r} is not valid; use {' or '.join(PROFILES)}.")
        env = {**PROFILES[profile], **{k: v for k, v in env.items() if v != ""}, _variable("profile"): profile}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(_variable(f.name))
            if raw is None or raw == "":
                continue
            rule: Rule = f.metadata["rule"]
            try:
                values[f.name] = rule.parse(raw)
            except SettingsError:
                raise
            except ValueError:
                raise SettingsError(f"{_variable(f.name)}={raw!r} is not valid; {rule.allowed}.") from None
        values.update(overrides)
        return cls(**values)

    def shown(self, name: str) -> str:
        """A setting's value as text for people and logs, with secret Spark settings masked."""
        value = getattr(self, name)
        if isinstance(value, Mapping):
            return ";".join(f"{k}={v}" for k, v in masked(value).items())
        return str(value)

    def __repr__(self) -> str:
        # The generated repr would print LAKEHOUSE_SPARK_CONF secrets into any log line or trace showing settings.
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["spark_conf"] = masked(self.spark_conf)
        return f"Settings({', '.join(f'{name}={value!r}' for name, value in values.items())})"

    @property
    def kafka_dir(self) -> str:
        return f"{self.home}/kafka"

    def kafka_node_ports(self, nodes: int | None = None) -> list[tuple[int, int]]:
        """(client, controller) port of each embedded Kafka node: node i's are the base ports + 2(i-1).

        A stride of 2 keeps the default pair (9092, 9093) contiguous: 9092-9097 for three nodes.
        """
        count = nodes or self.kafka_nodes
        pairs = [(self.kafka_port + 2 * i, self.kafka_controller_port + 2 * i) for i in range(count)]
        ports = [port for pair in pairs for port in pair]
        if max(ports) > 65535:
            raise SettingsError(
                f"With {count} Kafka nodes, node {count} would need port {max(ports)}, above 65535; lower "
                f"{PREFIX}KAFKA_PORT and {PREFIX}KAFKA_CONTROLLER_PORT.")
        clash = next((port for port in ports if ports.count(port) > 1), None)
        if clash is not None:
            raise SettingsError(
                f"With {count} Kafka nodes, node i listens on {PREFIX}KAFKA_PORT + 2(i-1) and "
                f"{PREFIX}KAFKA_CONTROLLER_PORT + 2(i-1), so port {clash} would be two nodes' port; make the two "
                "settings differ by an odd number (e.g. 9092 and 9093).")
        return pairs

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(environment variable, default, meaning) for every setting: for --help and the README."""
        rows = []
        for f in dataclasses.fields(cls):
            if f.name in _DERIVED:
                default = _DERIVED[f.name]
            elif f.default == "":
                default = "(none)"
            elif f.default is not dataclasses.MISSING:
                default = str(f.default)
            elif f.name == "home":
                default = "<checkout>/.lakehouse"
            else:
                default = "(none)"
            rows.append((_variable(f.name), default, f.metadata["help"]))
        return rows
