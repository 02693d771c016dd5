"""Benchmark scripts that print numbers (not tests); `benchmarks.harness` is what they share."""
