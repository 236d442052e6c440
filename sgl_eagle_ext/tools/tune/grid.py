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
        cell = run.cells.get((1, steps))
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
            "tok_s": 1000 * cell.accept_len / cycle,
            "source": f"measured ({run.path.name})",
        }
    one = {k: v for k, v in cells.items() if k[0] == 1}
    preds = model.predict(one, {1: baseline_ms} if baseline_ms else {}, max_steps).get(1, [])
    for p in preds:
        if p.steps == 0 or (p.steps, 1, p.steps + 1) in rows:
            continue
        rows[(p.steps, 1, p.steps + 1)] = {
            "steps": p.steps,
            "topk": 1,
            "draft_tokens": p.steps + 1,
            "valid": True,
            "accept_len": p.accept_len,
            "cycle_ms": p.cycle_ms,
            "tok_s": p.tok_s,
            "source": "predicted chain" + ("" if p.measured else " (cycle fitted)"),
        }
    ranked = sorted(rows.values(), key=lambda r: (not r["valid"], -r["tok_s"]))
    for r in ranked:
        r["vs_baseline"] = r["tok_s"] * baseline_ms / 1000 if baseline_ms else None
    return ranked


def render(ranked: list[dict]) -> list[str]:
    lines = [
        "fixed settings, one stream (best first):",
        f"{'steps':>5} {'topk':>4} {'draft':>5} {'accept':>7} {'cycle ms':>9} {'tok/s':>8} "
        f"{'vs base':>8}  source",
    ]
    for r in ranked:
        vs = f"{r['vs_baseline']:7.2f}x" if r["vs_baseline"] else "       -"
        bad = "" if r["valid"] else "  INVALID: more draft tokens than the tree has"
        lines.append(
            f"{r['steps']:5d} {r['topk']:4d} {r['draft_tokens']:5d} {r['accept_len']:7.2f} "
            f"{r['cycle_ms']:9.2f} {r['tok_s']:8.1f} {vs}  {r['source']}{bad}"
        )
    return lines
