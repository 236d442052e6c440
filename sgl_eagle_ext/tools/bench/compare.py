"""A/B and N-arm analysis: side-by-side tables, ratios, crossover level, recommendation.

Levels are concurrencies or request rates (loads.Axis): every message names
them through the axis (c=4, rate=2/s).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.common.table import text as _n
from sgl_eagle_ext.tools.bench.level_view import view
from sgl_eagle_ext.tools.bench.loads import CONCURRENCY, Axis


def ratio(b: float | None, a: float | None) -> float | None:
    """b / a; inf when only b is positive; None when undefined."""
    if a is None or b is None:
        return None
    if a == 0:
        return math.inf if b > 0 else None
    return b / a


# Where B (speculation) stops paying over the levels: common/figures.py.
crossover = figures.crossover


def _x(r: float | None) -> str:
    if r is None:
        return "-"
    return "inf" if math.isinf(r) else f"x{r:.2f}"


@dataclass(frozen=True)
class Pair:
    """One level finished by an arm and the reference (a compare record's `pairs`:
    record() of each)."""

    level: float
    a_output_tok_s: float | None
    b_output_tok_s: float | None
    throughput_ratio: float | None
    a_tpot_p50_ms: float | None
    b_tpot_p50_ms: float | None
    tpot_ratio: float | None
    a_goodput_tok_s: float | None
    b_goodput_tok_s: float | None
    goodput_ratio: float | None
    a_e2e_p99_ms: float | None
    b_e2e_p99_ms: float | None
    b_accept_length: float | None
    a_errors: int
    b_errors: int

    def record(self, axis: Axis) -> dict:
        fields = asdict(self)
        return {axis.key: fields.pop("level"), **fields}


def side_by_side(
    levels: list[float],
    a: dict[float, dict],
    b: dict[float, dict],
    name_a: str,
    name_b: str,
    axis: Axis = CONCURRENCY,
) -> tuple[list[str], list[Pair]]:
    """Table lines and the levels both arms finished."""
    bar = " | "
    table = Table(
        Col("conc" if axis is CONCURRENCY else "rate", 5, "g"),
        Col("A tok/s", 9, ".1f", sep=bar),
        Col("B tok/s", 9, ".1f"),
        Col("B/A", 6),
        Col("A TPOT", 7, ".1f", sep=bar),
        Col("B TPOT", 7, ".1f"),
        Col("B/A", 6),
        Col("A E2E99", 8, ".2f", sep=bar),
        Col("B E2E99", 8, ".2f"),
        Col("A good", 8, ".1f", sep=bar),
        Col("B good", 8, ".1f"),
        Col("B/A", 6),
        Col("B acc", 5, ".2f", sep=bar),
        L("err A/B", sep=bar),
    )
    pairs = []
    for c in levels:
        if a.get(c) is None or b.get(c) is None:
            continue
        fa, fb = view(a[c]), view(b[c])
        ta, tb = fa.at("tpot_ms", "p50"), fb.at("tpot_ms", "p50")
        pairs.append(
            Pair(
                level=c,
                a_output_tok_s=fa.output_tok_s,
                b_output_tok_s=fb.output_tok_s,
                throughput_ratio=ratio(fb.output_tok_s, fa.output_tok_s),
                a_tpot_p50_ms=ta,
                b_tpot_p50_ms=tb,
                tpot_ratio=ratio(tb, ta),
                a_goodput_tok_s=fa.goodput_tok_s,
                b_goodput_tok_s=fb.goodput_tok_s,
                goodput_ratio=ratio(fb.goodput_tok_s, fa.goodput_tok_s),
                a_e2e_p99_ms=fa.at("e2e_ms", "p99"),
                b_e2e_p99_ms=fb.at("e2e_ms", "p99"),
                b_accept_length=fb.accept_length,
                a_errors=fa.error_count,
                b_errors=fb.error_count,
            )
        )

    def seconds(ms):
        return None if ms is None else ms / 1e3

    cells = [
        (p.level, p.a_output_tok_s, p.b_output_tok_s, _x(p.throughput_ratio))
        + (p.a_tpot_p50_ms, p.b_tpot_p50_ms, _x(p.tpot_ratio))
        + (seconds(p.a_e2e_p99_ms), seconds(p.b_e2e_p99_ms))
        + (p.a_goodput_tok_s, p.b_goodput_tok_s, _x(p.goodput_ratio))
        + (p.b_accept_length, f"{p.a_errors}/{p.b_errors}")
        for p in pairs
    ]
    rows = [
        f"A = {name_a}   B = {name_b}   (tok/s: output tokens/s; TPOT p50 ms; "
        f"E2E p99 s; good: goodput tok/s within the SLO; acc: accept length)",
        *table.render(cells, rule="-"),
    ]
    return rows, pairs


def crossover_line(
    kind: str, x: figures.Crossover, max_level: float | None, axis: Axis = CONCURRENCY
) -> str:
    t = axis.tag
    if x.verdict == "no data":
        return f"crossover by {kind}: no data"
    if x.verdict == "always":
        return (
            f"crossover by {kind}: none up to {t(max_level)}: speculation pays at every "
            f"tested level"
        )
    if x.verdict == "never":
        return f"crossover by {kind}: speculation never pays (already loses at {t(x.level)})"
    est = f" (interpolated ~{x.estimate:.1f})" if x.estimate else ""
    if x.verdict == "until":
        return (
            f"crossover by {kind}: {t(x.level)}{est}: pays up to {t(x.last_paying)}, "
            f"loses from {t(x.level)} up"
        )
    losing = ", ".join(f"{c:g}" for c in x.losing_levels)
    if x.level is None:
        return (
            f"crossover by {kind}: unclear: pays at the highest level {t(x.last_paying)} "
            f"but loses at {axis.short}={losing} "
            f"(noisy: more prompts per level or --runs)"
        )
    return (
        f"crossover by {kind}: {t(x.level)}{est}, but the ratio crosses 1 more than once "
        f"(also loses at {axis.short}={losing}): noisy"
    )


def recommend(
    name_a: str,
    name_b: str,
    thr: figures.Crossover,
    good: figures.Crossover,
    per_level: list[Pair],
    lossless_verdict: str | None,
    slo_text: str,
    axis: Axis = CONCURRENCY,
) -> str:
    t = axis.tag
    load = "concurrency" if axis is CONCURRENCY else "request rate"
    by_c = {p.level: p for p in per_level}
    lines = []
    if lossless_verdict == "DIFFERS":
        lines.append(
            f"Do not serve {name_b} before finding out why its greedy output differs "
            f"from {name_a} (lossless check above)."
        )
    ratios = [(p.level, p.throughput_ratio) for p in per_level if p.throughput_ratio is not None]
    if not ratios:
        return "No level finished on both arms: no recommendation."
    best = max(ratios, key=lambda t: t[1])
    worst = min(ratios, key=lambda t: t[1])
    v = thr.verdict
    if v == "never":
        lines.append(
            f"Serve {name_a}: speculation ({name_b}) does not pay at any tested "
            f"{load} (best x{best[1]:.2f} at {t(best[0])})."
        )
    elif v == "always":
        lines.append(
            f"Serve {name_b} for this workload: it pays at every tested {load} "
            f"(x{worst[1]:.2f} at worst, {t(worst[0])}; x{best[1]:.2f} at best, "
            f"{t(best[0])}). Sweep a higher {load} to find where it stops paying."
        )
    elif v in ("until", "mixed") and thr.level is not None:
        top = by_c[thr.last_paying].throughput_ratio
        unit = "concurrent requests" if axis is CONCURRENCY else "req/s"
        lines.append(
            f"Serve {name_b} while the server runs at most ~{thr.last_paying:g} "
            f"{unit} (x{best[1]:.2f} at {t(best[0])}, x{top:.2f} at "
            f"{t(thr.last_paying)}); from ~{thr.level:g} {unit} serve "
            f"{name_a} ({name_b} gives x{worst[1]:.2f} at {t(worst[0])}). If the load "
            f"crosses that point, switch presets by load, cap --max-running-requests, "
            f"or serve eagle3-adaptive."
        )
    else:
        lines.append(
            f"No clear winner: the throughput ratio goes from x{worst[1]:.2f} "
            f"({t(worst[0])}) to x{best[1]:.2f} ({t(best[0])}) without a single "
            f"crossover. Repeat with more prompts per level."
        )
    gv = good.verdict
    if slo_text and gv not in ("no data",):
        if gv == "always":
            lines.append(
                f"For latency-bound serving ({slo_text}) {name_b} also wins at every level."
            )
        elif gv == "never":
            lines.append(
                f"For latency-bound serving ({slo_text}) {name_b} never gives more goodput."
            )
        elif good.level is not None:
            lines.append(
                f"For latency-bound serving ({slo_text}) {name_b} stops paying from "
                f"{t(good.level)}."
            )
    return " ".join(lines)


# ---------------------------------------------------------------- N arms
@dataclass(frozen=True)
class Best:
    """One level finished by every arm (a compare record's `levels`: asdict of each)."""

    level: float
    best: str  # the arm with the highest value
    values: dict[str, float]  # arm -> its value
    ratio_to_best: dict[str, float | None]  # arm -> value / the best's (1.0 for the best)


def by_level(
    levels: list[float], arms: dict[str, dict[float, dict]], key: str = "output_tok_s"
) -> list[Best]:
    """Per level finished by every arm: each arm's value of `key` (a Level field), the
    best arm, every arm's ratio to the best."""
    out = []
    for c in levels:
        values = {name: getattr(view(lv.get(c) or {}), key) for name, lv in arms.items()}
        if any(v is None for v in values.values()):
            continue
        best = max(values, key=lambda n: values[n])
        top = values[best]
        out.append(Best(c, best, values, {n: ratio(v, top) for n, v in values.items()}))
    return out


def arms_table(rows: list[Best], names: list[str], axis: Axis = CONCURRENCY) -> list[str]:
    """One line per level: every arm's tok/s and its ratio to the level's best."""
    width = max(14, *(len(n) + 2 for n in names))
    table = Table(
        Col("conc" if axis is CONCURRENCY else "rate", 5, "g"),
        *(Col(n, width, sep=" | " if i == 0 else " ") for i, n in enumerate(names)),
        L("best", sep=" | "),
    )
    cells = [
        (r.level, *(f"{_n(r.values[n])} ({_x(r.ratio_to_best[n])})" for n in names), r.best)
        for r in rows
    ]
    return [
        "output tok/s per arm (ratio to the level's best arm)",
        *table.render(cells, rule="-"),
    ]


def best_arm_line(rows: list[Best], axis: Axis = CONCURRENCY) -> str:
    """Where the best arm changes, e.g. `eagle3-2step at c=1..2, baseline at c=5..10`."""
    if not rows:
        return "best arm: no level finished on every arm"
    spans: list[list] = []
    for r in rows:
        if spans and spans[-1][0] == r.best:
            spans[-1][2] = r.level
        else:
            spans.append([r.best, r.level, r.level])
    parts = [
        f"{name} at {axis.short}={lo:g}" + (f"..{hi:g}" if hi != lo else "") + axis.unit
        for name, lo, hi in spans
    ]
    return "best arm by throughput: " + ", ".join(parts)


# A verdict (ratio, best arm, crossover) compares level throughputs whose noise shrinks
# with the requests behind them; below this many completed requests per arm at a level
# (the usual threshold for a mean to be near-normal) the printed ratio is not to be
# trusted, so the report says so.
MIN_REQUESTS = 30


def sample_size_warning(
    levels: list[float], per_arm: dict[str, dict[float, dict]], axis: Axis = CONCURRENCY
) -> str | None:
    """The warning when a level's fewest completed requests of any arm is below
    MIN_REQUESTS (None: every level has enough)."""
    thin = []
    for lv in levels:
        n = min(view(f.get(lv) or {}).completed or 0 for f in per_arm.values())
        if n < MIN_REQUESTS:
            thin.append((lv, n))
    if not thin:
        return None
    where = ", ".join(f"{axis.tag(lv)}: {n}" for lv, n in thin)
    return (
        f"the verdict rests on too few requests ({where} completed per arm). Rule: a "
        f"throughput ratio, best arm or crossover needs >= {MIN_REQUESTS} completed requests "
        f"per arm at each level, else run-to-run noise can flip it; raise --num-prompts "
        f"(or give --duration)"
    )
