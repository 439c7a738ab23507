"""Benchmark drivers; their output is what docs/benchmarks.md reports."""
