"""Benchmarks (`optimusnic bench`, `make bench`): figures written to bench/results.md."""
