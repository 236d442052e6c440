"""Test doubles: not part of the shipped package (tests and benchmarks only)."""
