"""Fixed presets for one stream: steps x topk x draft tokens, ranked by tok/s.

Measured rows come from fixed-preset logs (their server_args give the setting; the
one-stream windows give tok/s); chain rows (topk 1, steps + 1 draft tokens) that were
not run are predicted from the pooled per-position acceptance and the cycle fit at
batch size 1. A setting is valid only with 2 <= draft tokens <= topk + (steps - 1) x
topk^2 + 1: SGLang's tree keeps the best draft tokens - 1 of the topk candidates of the
first step and topk^2 of each later one (speculative/spec_utils.py); for a chain that is
steps + 1.
"""

from __future__ import annotations

from sgl_eagle_ext.common import chain, figures
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.tools.tune import model


def max_draft_tokens(steps: int, topk: int) -> int:
    return topk + (steps - 1) * topk * topk + 1


def valid(steps: int, topk: int, draft_tokens: int) -> bool:
    return steps >= 1 and 2 <= draft_tokens <= max_draft_tokens(steps, topk)


def rank(runs, cells, baseline_ms: float | None, max_steps: int) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for run in runs:
        setting = run.setting
        if setting is None or run.spec.get("speculative_adaptive"):
            continue
        steps, topk, ndt = setting
        cell = run.cells().get((1, steps))
        if cell is None or not cell.cycles or cell.accept_len is None:
            continue
        cycle = cell.mean("cycle")
        if cycle <= 0:  # a window with cycle_ms=0 measured nothing
            continue
        rows[setting] = {
            "steps": steps,
            "topk": topk,
            "draft_tokens": ndt,
            "valid": valid(*setting),
            "accept_len": cell.accept_len,
            "cycle_ms": cycle,
            "tok_s": figures.cycle_tok_s(cell.accept_len, 1, cycle),
            "source": f"measured ({run.path.name})",
        }
    one = {k: v for k, v in cells.items() if k[0] == 1}
    preds = model.predict(one, {1: baseline_ms} if baseline_ms else {}, max_steps).get(1, [])
    for p in preds:
        if p.steps == 0 or (p.steps, 1, chain.draft_tokens(p.steps)) in rows:
            continue
        rows[(p.steps, 1, chain.draft_tokens(p.steps))] = {
            "steps": p.steps,
            "topk": 1,
            "draft_tokens": chain.draft_tokens(p.steps),
            "valid": True,
            "accept_len": p.accept_len,
            "cycle_ms": p.cycle_ms,
            "tok_s": p.tok_s,
            "source": "predicted chain" + ("" if p.measured else " (cycle fitted)"),
        }
    ranked = sorted(rows.values(), key=lambda r: (not r["valid"], -r["tok_s"]))
    for r in ranked:
        r["vs_baseline"] = figures.gain(r["accept_len"], r["cycle_ms"], baseline_ms)
    return ranked


def render(ranked: list[dict]) -> list[str]:
    table = Table(
        Col("steps", 5, "d"),
        Col("topk", 4, "d"),
        Col("draft", 5, "d"),
        Col("accept", 7, ".2f"),
        Col("cycle ms", 9, ".2f"),
        Col("tok/s", 8, ".1f"),
        Col("vs base", 8, ".2f", "x"),
        L("source", sep="  "),
    )
    rows = [
        (
            r["steps"],
            r["topk"],
            r["draft_tokens"],
            r["accept_len"],
            r["cycle_ms"],
            r["tok_s"],
            r["vs_baseline"] or None,
            r["source"] + ("" if r["valid"] else "  INVALID: more draft tokens than the tree has"),
        )
        for r in ranked
    ]
    return ["fixed settings, one stream (best first):", *table.render(rows)]
