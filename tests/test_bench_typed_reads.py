"""Bench results are read through their typed views (tools/bench/records.py and the
dataclasses each view builds), not through string keys into dicts: a ratchet on the
string-key reads left in tools/bench, counted from the source (AST).

Counted: `x["name"]` read (not written) and `x.get("name")`. Not counted: the modules
that parse what others wrote (SGLang's replies and streams, datasets, traces), where
the keys are the other side's format. And a ratchet on tools/bench's size."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "sgl_eagle_ext" / "tools" / "bench"
# keys in another program's format: SGLang's stream and /server_info, dataset files
FOREIGN = {"client.py", "probe.py", "datasets.py", "hf_data.py", "prompts.py", "traces.py"}
LIMIT = 100


def string_key_reads(source: str) -> list[int]:
    """Line numbers of the string-key reads in `source`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ) or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            lines.append(node.lineno)
    return lines


def test_the_counter_counts_reads_not_writes():
    src = 'a = r["x"]\nb = r.get("y")\nr["z"] = 1\nr["w"] += 1\nc = r[0]\n'
    assert string_key_reads(src) == [1, 2]


def test_bench_reads_its_results_through_typed_views():
    per_file = {}
    for path in sorted(BENCH.rglob("*.py")):
        if path.name in FOREIGN:
            continue
        n = len(string_key_reads(path.read_text()))
        if n:
            per_file[str(path.relative_to(BENCH))] = n
    total = sum(per_file.values())
    worst = ", ".join(f"{k} {v}" for k, v in sorted(per_file.items(), key=lambda kv: -kv[1])[:5])
    assert total < LIMIT, f"{total} string-key reads in tools/bench (most: {worst})"


# tools/bench's size: a ratchet that a change may lower, never raise unnoticed (issue 35's
# goal is 6,500 lines; sglang.bench_serving is about 5,500 with its datasets)
SIZE_LIMIT = 8_886


def test_bench_does_not_grow():
    lines = sum(len(p.read_text().splitlines()) for p in BENCH.rglob("*.py"))
    assert lines <= SIZE_LIMIT, f"tools/bench is {lines} lines (limit {SIZE_LIMIT})"
