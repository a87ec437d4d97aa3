"""The read-only guard (serving/jvm/ReadOnlyGuard.java) compiled once against pyspark's jars into the jars folder."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "jvm" / "ReadOnlyGuard.java"
EXTENSION = "lakehouse.serving.ReadOnlyGuard"
SETTING = "spark.lakehouse.readOnly"   # ReadOnlyGuard.SETTING
OWNER = "spark.lakehouse.readOnly.owner"   # ReadOnlyGuard.OWNER: the server's own session may register tables
OWNER_TOKEN = "LAKEHOUSE_READ_ONLY_OWNER_TOKEN"   # ReadOnlyGuard.OWNER_TOKEN: the value OWNER must have


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def jar_path(jars_dir: str | Path) -> Path:
    """Where the guard's jar is for this source and this pyspark: a new name when either changes."""
    import pyspark

    digest = hashlib.sha256(SOURCE.read_bytes() + pyspark.__version__.encode()).hexdigest()[:12]
    return Path(jars_dir) / "lakehouse" / f"read-only-guard-{digest}.jar"


def owner_token() -> str:
    """A fresh secret for this server process, put in its environment before the JVM starts (which inherits it)."""
    os.environ[OWNER_TOKEN] = secrets.token_hex(16)
    return os.environ[OWNER_TOKEN]


def build_guard(jars_dir: str | Path) -> Path:
    """The guard's jar, compiled with javac first if it is not there yet (about 2 s)."""
    target = jar_path(jars_dir)
    if target.exists():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not on PATH: the SQL server's read-only guard is compiled once with the JDK's "
                           "javac (Debian: apt-get install openjdk-17-jdk-headless)")
    with tempfile.TemporaryDirectory() as work:
        classes = Path(work) / "classes"
        proc = subprocess.run([javac, "-nowarn", "-cp", f"{_pyspark_jars()}/*", "-d", str(classes), str(SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"javac could not compile {SOURCE.name}: {proc.stderr.strip()[-500:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        with zipfile.ZipFile(partial, "w") as jar:
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        for old in target.parent.glob("read-only-guard-*.jar"):
            old.unlink()
        partial.replace(target)
    return target
