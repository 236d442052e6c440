"""One source for each figure (issue 35): accept length, tokens per cycle, tok/s from a
cycle, ms per token, break-even, gain, per-position acceptance and the crossover are
computed in common/figures.py and nowhere else. The scan reads every module of the
package and the benchmarks (AST, not text) for the expressions that compute them by
hand; the unit tests pin what each function returns."""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from sgl_eagle_ext.common import figures

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "sgl_eagle_ext" / "common" / "figures.py"


def _names(node: ast.AST) -> set[str]:
    """The identifiers an expression reads: names, attributes, string subscripts."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id.lower())
        elif isinstance(n, ast.Attribute):
            out.add(n.attr.lower())
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.add(n.value.lower())
    return out


def _mentions(node: ast.AST, *words: str) -> bool:
    return any(w in name for name in _names(node) for w in words)


def _is_thousand(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (1000, 1000.0, 1e3)


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a product (a * b * c), or the node itself."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def second_formulas(source: str) -> list[tuple[int, str]]:
    """(line, what) for each expression that computes a figure by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "crossover":
            found.append((node.lineno, "a crossover"))
        if not isinstance(node, ast.BinOp):
            continue
        left, right = node.left, node.right
        what = None
        if isinstance(node.op, ast.Div):
            if any(_is_thousand(f) for f in _factors(left)):
                what = "tok/s or ms per token (1000 * ... / ...)"
            elif _is_thousand(right) and _mentions(left, "tps", "tok_s"):
                what = "tokens from a rate (tok/s * ms / 1000)"
            elif (_mentions(left, "cycle") and _mentions(right, "base")) or (
                _mentions(left, "base") and _mentions(right, "cycle")
            ):
                what = "break-even or gain (cycle vs baseline)"
            elif _mentions(left, "token") and _mentions(right, "verify", "cycle"):
                what = "accept length (tokens / verify cycles)"
            elif _mentions(left, "accepted") and _mentions(right, "reached", "total"):
                what = "per-position acceptance"
        elif isinstance(node.op, ast.Add) and not any(
            isinstance(n, ast.JoinedStr)
            or (isinstance(n, ast.Constant) and isinstance(n.value, str))
            for n in (left, right)
        ):  # (text joined to text is no sum)
            sides = (left, right), (right, left)
            if any(
                _mentions(a, "draft")
                and (
                    _mentions(b, "verify", "cycle")
                    or (isinstance(b, ast.Constant) and b.value == 1)
                )
                for a, b in sides
            ):
                what = "tokens per cycle (correct drafts + bonus)"
        if what:
            found.append((node.lineno, what))
    return found


def sources() -> list[Path]:
    return sorted((ROOT / "sgl_eagle_ext").rglob("*.py")) + sorted(
        (ROOT / "benchmarks").rglob("*.py")
    )


@pytest.mark.parametrize(
    "expr",
    [
        "tok_s = 1000 * acc * self.bs / cycle",
        "ms = 1000 * bs / tps",
        "ms = 1000 / args.baseline_tps",
        "tau = self.cycle_ms / self.baseline_ms",
        "g = acc * base / cycle",
        "a = target_tps * cycle / 1000",
        "x = r['tok_s'] * baseline_ms / 1000",
        "acc = tokens / verify if verify else None",
        "acc = tokens / max(cycles, 1)",
        "alpha = accepted / reached",
        "t = drafts + verify",
        "t = correct_drafts + 1",
        "def crossover(levels, ratios):\n    return {}",
    ],
)
def test_the_scan_finds_a_second_formula(expr):
    assert second_formulas(expr), expr


@pytest.mark.parametrize(
    "expr",
    [
        "s = self.sums[row, stat] / self.cycles",  # a mean over cycles
        "pct = 100 * self.mean(row) / cycle",  # a share of the cycle
        "secs = c.ms[p] / 1000",  # a unit
        "t = obj['timestamp'] / 1000.0",
        "tps = tokens / seconds",  # a measured rate, not a cycle's
        "n = chain.draft_tokens(steps)",
        "crossover = figures.crossover",
    ],
)
def test_the_scan_leaves_other_arithmetic(expr):
    assert second_formulas(expr) == [], expr


def test_no_second_formula_outside_figures():
    found = []
    for path in sources():
        if path == HOME:
            continue
        for line, what in second_formulas(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, "compute these with common/figures.py:\n" + "\n".join(found)


def test_the_home_holds_each_formula():
    """The scan finds each kind of figure in its home (so the rules look for what the
    home computes), the crossover once."""
    kinds = Counter(what for _, what in second_formulas(HOME.read_text(encoding="utf-8")))
    assert kinds["a crossover"] == 1
    assert kinds["tok/s or ms per token (1000 * ... / ...)"] == 2  # tok_s, ms_per_token
    assert kinds["break-even or gain (cycle vs baseline)"] == 1  # gain calls break_even
    for what in (
        "accept length (tokens / verify cycles)",
        "per-position acceptance",
        "tokens per cycle (correct drafts + bonus)",
    ):
        assert kinds[what] >= 1, what


def test_figures():
    assert figures.per_cycle(2) == 3 and figures.tokens_of_cycles(5, 4) == 9
    assert figures.cycle_tok_s(2.0, 4, 40.0) == 200.0  # 8 tokens every 40 ms
    assert figures.cycle_tok_s(None, 1, 40.0) is None and figures.cycle_tok_s(2, 1, 0) is None
    assert figures.tok_s(12, 1500.0) == 8.0 and figures.tok_s(1, 0) is None
    assert figures.ms_per_token(80.0, 4) == 50.0 and figures.ms_per_token(None) is None
    # 30 ms cycles against an 82 tok/s baseline need 2.46 (the profiling page's example)
    assert figures.break_even(30.0, figures.ms_per_token(82.0)) == pytest.approx(2.46)
    assert figures.gain(3.0, 30.0, 15.0) == 1.5 and figures.gain(3.0, 30.0, None) is None
    assert figures.pct_apart(103.0, 100.0) == pytest.approx(3.0)


def test_position_acceptance_both_conventions():
    hist = {0: 2, 1: 1, 3: 1}  # correct drafts -> cycles
    rates = figures.position_rates(hist)
    assert [r.accepted_cycles for r in rates] == [2, 1, 1]
    assert [r.rate for r in rates] == [0.5, 0.25, 0.25]
    assert [r.conditional for r in rates] == [0.5, 0.5, 1.0]
    # a 2-step chain never checks a third draft: its cycles do not count there
    assert figures.position_counts(hist, 2) == [(4, 2), (2, 1)]
    alphas = figures.conditional_acceptance(figures.position_counts(hist, 2))
    assert figures.cumulative_acceptance(alphas) == [0.5, 0.25]
    assert figures.chain_accept_length(alphas, 2) == 1.75
    assert figures.chain_accept_length(alphas, 3) == 1.75 + 0.125  # the last alpha reused


def test_crossover():
    cx = figures.crossover
    until = cx([1, 2, 4, 8], [1.5, 1.2, 0.8, 0.6])
    assert (until.verdict, until.level, until.last_paying) == ("until", 4, 2)
    assert until.estimate == pytest.approx(2**1.5)
    assert cx([1, 2], [math.inf, 0.5]).estimate is None
    # verdicts decided elsewhere (tune live's noise margin): the same classification
    by_verdict = cx([1, 2, 4], pays=[True, None, False])
    assert (by_verdict.verdict, by_verdict.level, by_verdict.last_paying) == (
        "until",
        4,
        1,
    )
    assert cx([1, 2, 4], pays=[False, True, False]).verdict == "mixed"
    assert cx([1], pays=[None]).verdict == "no data"


def test_crossover_reads_back_from_a_record():
    import dataclasses

    x = figures.crossover([1, 2, 4, 8], [1.5, 0.95, 1.1, 0.7])
    assert figures.Crossover.read(
        json.loads(json.dumps(dataclasses.asdict(x)))
    ) == dataclasses.replace(x, losing_levels=list(x.losing_levels))
    assert figures.Crossover.read({"verdict": "never", "level": 4, "junk": 1}).level == 4
    assert figures.Crossover.read(None).verdict == "no data"
