"""Dagster definitions, resources, assets, and the `lakehouse` command."""
