#!/usr/bin/env bash
# The README's two commands, on a fresh machine or an old one:
#   infra/bootstrap.sh demo [lakehouse demo options]   set up, then run the main job end to end
#   infra/bootstrap.sh test [pytest options]           set up, then run the tests
# Setup is idempotent: a virtual environment in .venv, the pinned packages, the Maven jars.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '==> %s\n' "$*"; }
fail() { printf 'error: %s\n' "$*" >&2; exit 2; }

mode=${1:-}
case "$mode" in
  demo|test) shift ;;
  *) fail "say what to run: 'infra/bootstrap.sh demo' (the main job) or 'infra/bootstrap.sh test' (the tests)." ;;
esac

# Python 3.11 (pyspark 4.2 and the pins in pyproject.toml are checked against it).
python=${LAKEHOUSE_PYTHON:-}
if [ -z "$python" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python=$candidate; break
    fi
  done
fi
[ -n "$python" ] || fail "Python 3.11 is needed; install it or point LAKEHOUSE_PYTHON at one."

# Java 17+ for Spark 4 and Kafka 4, Maven for the jars.
command -v java >/dev/null || fail "Java 17 or newer is needed (Debian: apt-get install openjdk-17-jdk-headless)."
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${java_major:-0}" -ge 17 ] || fail "Java ${java_major:-?} found; Spark 4 and Kafka 4 need Java 17 or newer."
command -v mvn >/dev/null || fail "Maven is needed to fetch the JVM jars (Debian: apt-get install maven)."

if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment in .venv"
  "$python" -m venv .venv
fi
stamp=".venv/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  say "installing the pinned Python packages (first time: pyspark alone is ~450 MB)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  # The build backend warns that an editable install shadows same-named folders; that is the point here.
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet -e '.[dev]'
  rm -f .venv/.installed-* && touch "$stamp"
fi

# The browser tests drive Debian's Chromium (never a browser that Playwright would download).
if [ "$mode" = test ] && ! command -v chromium >/dev/null; then
  say "installing Chromium for the browser tests"
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || fail "Chromium is needed for the browser tests and could not be installed; install it as root (Debian: apt-get install chromium)."
fi

# The CDC tests run a real PostgreSQL (infra/postgres.py): Debian's server programs, without the cluster the
# package would otherwise create and start on port 5432 (the project makes its own in its home).
if [ "$mode" = test ] && ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  say "installing PostgreSQL's server programs for the CDC tests"
  { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
      && mkdir -p /etc/postgresql-common/createcluster.d \
      && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/lakehouse.conf \
      && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } \
    || fail "PostgreSQL is needed for the CDC tests and could not be installed; install it as root (Debian: apt-get install postgresql)."
fi

say "fetching the JVM jars with Maven (skipped when present)"
.venv/bin/lakehouse setup

case "$mode" in
  demo) say "running the main job"; exec .venv/bin/lakehouse demo "$@" ;;
  test) say "running the tests"; exec .venv/bin/python -m pytest "$@" ;;
esac
