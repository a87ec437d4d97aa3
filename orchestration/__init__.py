"""Dagster only: the code location's definitions (assets, checks, jobs, schedules, sensors), resources, runs.

A Dagster project of your own gets the lakehouse for a pipeline from one call:
`from lakehouse.orchestration.location import lakehouse_definitions`.
"""
