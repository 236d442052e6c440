"""Benchmarks that settle "does speculation pay here?" (python -m sgl_eagle_ext.bench).

Modules, one job each: prompts (prompt sets), client (async streaming HTTP),
probe (server counters and facts), stats, records (atomic JSONL/CSV appends),
provenance, progress, single, sweep, lossless, compare (A/B analysis), ab
(presets through the launcher), plot, fake_server (a local endpoint that
streams as fast as it can: client ceiling and fault tests), cli.
"""
