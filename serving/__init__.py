"""Serving the lake: SQL, history and Dagster run steps on `lakehouse serve`'s warm Spark session."""
