"""Data quality: expectation suites as code, their per-batch evaluation, results, reports (Great Expectations)."""

import sys

# Great Expectations probes Spark Connect at import. Importing pyspark.sql.connect without Spark Connect's
# extras calls sys.exit(0) when the main module has no __file__, which is how Dagster starts a run's
# worker process: the run vanished with "exited with code 0". The project does not use Spark Connect, so
# GX is told the two modules it probes are absent (it then works with plain Spark DataFrames).
for _probed in ("pyspark.sql.connect.dataframe", "pyspark.sql.connect.session"):
    sys.modules.setdefault(_probed, None)  # type: ignore[arg-type]
