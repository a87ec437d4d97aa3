"""Benchmarks: figures, never tests (see docs/benchmarks.md)."""
