"""Benchmarks behind ``diffpolicy bench``: each prints one JSON object."""
