"""Fetch the JVM jars named in infra/maven/pom.xml into the local jars folder, once."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

log = logging.getLogger(__name__)

MAVEN_DIR = Path(__file__).resolve().parent / "maven"
POM = MAVEN_DIR / "pom.xml"
# Spark's own jars come with pyspark; "spark" holds only Delta and the Kafka connector; "s3" the S3A connector
# and the AWS SDK modules it loads, which a session adds only for a lake on s3a:// (infra/spark.py); "debezium" the
# PostgreSQL connector, a plugin of the Kafka Connect worker that `lakehouse cdc` runs (infra/kafka_connect.py).
CLASSPATHS = ("spark", "kafka", "s3", "debezium")
_STAMP = ".complete"


class JarsMissing(RuntimeError):
    """The jars folder is not filled yet."""


_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _manifest_digest(name: str) -> str:
    """A digest of what one classpath is resolved from: the shared properties and its own profile.

    Per classpath, so that adding or changing one profile does not make `setup` resolve the others again.
    """
    root = ET.fromstring(POM.read_bytes())
    parts = [root.find("m:properties", _NS)]
    parts += [p for p in root.iterfind("m:profiles/m:profile", _NS) if p.findtext("m:id", namespaces=_NS) == name]
    return hashlib.sha256(b"".join(ET.tostring(part) for part in parts if part is not None)).hexdigest()


def classpath_dir(jars_dir: str | Path, name: str) -> Path:
    return Path(jars_dir) / name


def is_complete(jars_dir: str | Path, name: str) -> bool:
    stamp = classpath_dir(jars_dir, name) / _STAMP
    return stamp.exists() and stamp.read_text().strip() == _manifest_digest(name)


def fetch_jars(jars_dir: str | Path, *, maven_settings: str = "", force: bool = False) -> dict[str, int]:
    """Resolve both classpaths with Maven; a folder whose stamp matches the manifest is skipped."""
    if shutil.which("mvn") is None:
        raise JarsMissing("Maven (mvn) is not on PATH; install it (Debian: apt-get install maven) and run again.")
    settings_xml = maven_settings or str(MAVEN_DIR / "settings.xml")
    counts: dict[str, int] = {}
    for name in CLASSPATHS:
        target = classpath_dir(jars_dir, name).resolve()
        if is_complete(jars_dir, name) and not force:
            counts[name] = len(list(target.glob("*.jar")))
            log.info("jars/%s: %d jars already present, skipping", name, counts[name])
            continue
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        log.info("jars/%s: resolving with Maven (first time only)...", name)
        cmd = [
            "mvn", "-q", "-B", "-s", settings_xml, "-f", str(POM), "-P", name,
            "dependency:copy-dependencies", f"-DoutputDirectory={target}", "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            errors = [line for line in proc.stdout.splitlines() if "[ERROR]" in line][:3]
            raise JarsMissing(f"Maven could not resolve the {name} jars: {' '.join(errors) or proc.stderr[-500:]}")
        (target / _STAMP).write_text(_manifest_digest(name))
        counts[name] = len(list(target.glob("*.jar")))
        log.info("jars/%s: %d jars", name, counts[name])
    return counts


def jar_paths(jars_dir: str | Path, name: str) -> list[str]:
    """Every jar of one classpath; a clear error when setup has not run."""
    if not is_complete(jars_dir, name):
        raise JarsMissing(
            f"The {name} jars are not in {classpath_dir(jars_dir, name)}; run `lakehouse setup` first."
        )
    return sorted(str(p) for p in classpath_dir(jars_dir, name).glob("*.jar"))
