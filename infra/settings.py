"""One settings object, read once from `LAKEHOUSE_*` environment variables and passed down explicitly."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

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
    conf: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        if "=" not in item:
            raise SettingsError(
                f"LAKEHOUSE_SPARK_CONF item {item!r} has no '='; write it as key=value;key=value."
            )
        key, value = item.split("=", 1)
        conf[key.strip()] = value.strip()
    return conf


def _setting(default: Any, help: str, parse: Callable[[str], Any] | None = None) -> Any:
    meta = {"help": help, "parse": parse}
    if callable(default):  # a factory: the home folder, or an empty dict
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


# Settings whose default follows from another one (shown this way in --help and the README).
_DERIVED = {
    "lake_root": "<home>/lake",
    "jars_dir": "<home>/jars",
    "dagster_home": "<home>/dagster",
    "log_dir": "<home>/logs",
    "kafka_bootstrap": "<kafka_host>:<kafka_port>",
    "maven_settings": "infra/maven/settings.xml",
}


@dataclass(frozen=True)
class Settings:
    """Every address, path and size the lakehouse uses; defaults run everything on one machine."""

    home: str = _setting(_default_home, "State folder: jars, broker data, lake, Dagster home, logs.")
    lake_root: str = _setting("", "Root of all Delta tables: a folder or an object-store URI (s3a://...).")
    jars_dir: str = _setting("", "Where Maven puts the JVM jars.")
    dagster_home: str = _setting("", "DAGSTER_HOME for the UI and daemon.")
    log_dir: str = _setting("", "Logs of the broker, Spark and the main job.")
    maven_settings: str = _setting("", "Maven settings file for `lakehouse setup` (e.g. a company mirror).")

    kafka_bootstrap: str = _setting("", "Kafka bootstrap servers the pipeline uses.")
    kafka_host: str = _setting("127.0.0.1", "Address the embedded broker listens on.")
    kafka_port: int = _setting(9092, "Client port of the embedded broker.", int)
    kafka_controller_port: int = _setting(9093, "KRaft controller port of the embedded broker.", int)
    kafka_heap: str = _setting("512m", "JVM heap of the embedded broker.")
    kafka_replication_factor: int = _setting(1, "Replication factor for new topics (3 on a three-broker cluster).", int)

    spark_master: str = _setting("local[*]", "Spark master: local[*] or spark://host:7077.")
    spark_driver_memory: str = _setting("2g", "Spark driver memory.")
    spark_shuffle_partitions: int = _setting(4, "spark.sql.shuffle.partitions (small on one machine).", int)
    spark_ui: bool = _setting(False, "Start the Spark web UI (port 4040) with each session.", lambda v: v.lower() in ("1", "true", "yes"))
    spark_conf: Mapping[str, str] = _setting(dict, "Extra Spark settings, key=value;key=value (e.g. spark.hadoop.fs.s3a.endpoint=...).", _parse_conf)

    max_offsets_per_trigger: int = _setting(0, "Cap on Kafka records per micro-batch; 0 means no cap.", int)
    silver_dedup_watermark: str = _setting("1 hour", "How long silver remembers event ids to drop duplicates.")
    gold_watermark: str = _setting("10 minutes", "How late an event may be and still count in gold windows.")

    def __post_init__(self) -> None:
        home = self.home
        defaults = {
            "lake_root": f"{home}/lake",
            "jars_dir": f"{home}/jars",
            "dagster_home": f"{home}/dagster",
            "log_dir": f"{home}/logs",
            "kafka_bootstrap": f"{self.kafka_host}:{self.kafka_port}",
        }
        for name, value in defaults.items():
            if not getattr(self, name):
                object.__setattr__(self, name, value)
        for port_name in ("kafka_port", "kafka_controller_port"):
            port = getattr(self, port_name)
            if not 0 < port < 65536:
                raise SettingsError(f"{PREFIX}{port_name.upper()}={port} is not a TCP port; use 1-65535.")
        if self.kafka_port == self.kafka_controller_port:
            raise SettingsError(
                f"{PREFIX}KAFKA_PORT and {PREFIX}KAFKA_CONTROLLER_PORT are both {self.kafka_port}; give them different ports."
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Read every `LAKEHOUSE_<NAME>` variable; explicit overrides win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = env.get(PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            parse = f.metadata.get("parse")
            try:
                values[f.name] = parse(raw) if parse else raw
            except ValueError as exc:
                if isinstance(exc, SettingsError):
                    raise
                raise SettingsError(f"{PREFIX}{f.name.upper()}={raw!r} is not valid: {exc}.") from None
        values.update(overrides)
        return cls(**values)

    @property
    def kafka_dir(self) -> str:
        return f"{self.home}/kafka"

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(environment variable, default, meaning) for every setting: for --help and the README."""
        rows = []
        for f in dataclasses.fields(cls):
            if f.name in _DERIVED:
                default = _DERIVED[f.name]
            elif f.default is not dataclasses.MISSING:
                default = str(f.default)
            elif f.name == "home":
                default = "<checkout>/.lakehouse"
            else:
                default = "(none)"
            rows.append((PREFIX + f.name.upper(), default, f.metadata["help"]))
        return rows
