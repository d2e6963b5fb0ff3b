"""Benchmarks: run with ``python -m benchmarks.<name>``; figures in docs/benchmarks.md."""
