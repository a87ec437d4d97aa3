"""Data-quality suites and validation runners (Great Expectations; later issues)."""
