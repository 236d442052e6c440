"""Benchmarks that settle "does speculation pay here?" (python -m sgl_eagle_ext.bench).

Modules, one job each: prompts (prompt sets), client (async streaming HTTP),
probe (server counters and facts), stats, records (atomic JSONL/CSV appends),
provenance, progress, sweep (the level loop; loads, level_metrics and level_view:
a level's load, figures and printed row), single (a one-stream level read as runs),
lossless, compare (A/B analysis), arms (presets started through the launcher), plot. The command line: options (shared
argument groups), session (what every run builds from its arguments), commands/
(one module per subcommand: its parser and its run), cli (assembles and dispatches).
Test doubles (the fake SGLang endpoint) live outside the package, in tests/fakes/.
"""
