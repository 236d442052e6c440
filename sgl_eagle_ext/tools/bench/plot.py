"""bench plot RESULTS.jsonl: output tok/s and p50/p99 latencies against the load level.

One figure per run (the latest run with sweep records unless --run-id): every
arm of that run (both presets of an A/B, every preset of a compare) on the same
axes; x is the concurrency, or the request rate for open-loop runs. Levels that were
interrupted or during which the server died are left out and listed.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

from sgl_eagle_ext.common import paths
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import records
from sgl_eagle_ext.tools.bench.progress import Console
from sgl_eagle_ext.tools.bench.records import Level

PARTIAL = {"interrupted", "server died"}
PANELS = (
    ("tpot_ms", "TPOT (ms)", 1.0),
    ("ttft_ms", "TTFT (ms)", 1.0),
    ("e2e_ms", "end-to-end latency (s)", 1e-3),
)


def pick_run(recs: list[dict], run_id: str | None, source: str) -> tuple[str, list[Level]]:
    sweeps = [records.decode(r, Level) for r in recs if r.get("kind") == "sweep"]
    if not sweeps:
        raise UserError(
            f"{source}: no sweep records to plot.",
            fix="run `bench sweep` or `bench ab` with --results pointing here",
        )
    if run_id is None:
        run_id = sweeps[-1].run_id
    chosen = [r for r in sweeps if r.run_id == run_id]
    if not chosen:
        ids = sorted({str(r.run_id) for r in sweeps})
        raise UserError(
            f"{source}: no sweep records with run id {run_id}.",
            fix=f"use one of: {', '.join(ids[-10:])}",
        )
    return run_id, chosen


def shown(text) -> str:
    """Text for the figure: a non-UTF-8 label or path (surrogate escapes) drawn with
    replacement characters (the records keep its bytes)."""
    return str(text).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def arm_name(r: Level) -> str:
    return shown(r.arm or r.url or "server")


def series(chosen: list[Level]) -> tuple[dict[str, list[Level]], list[str]]:
    arms: dict[str, dict[float, Level]] = defaultdict(dict)
    skipped = []
    for r in chosen:
        key, x = r.level
        tag = f"{'rate' if key == 'request_rate' else 'c'}={x:g}"
        if r.status in PARTIAL:
            skipped.append(f"{arm_name(r)} {tag} ({r.status})")
            continue
        arms[arm_name(r)][x] = r  # a rerun level: the last one wins
    return {a: [lv[c] for c in sorted(lv)] for a, lv in arms.items()}, skipped


def load_text(r: Level) -> str:
    """The load a sweep record was measured under, from what its requests asked for
    (session.load_shape), for a figure's subtitle: e.g. "dataset shipped (mixed),
    input dataset, output 24 tokens/request, Poisson arrivals, at most 8 in flight,
    streamed". Older records without these fields: --max-tokens."""
    prompts = Path(str((r.provenance or {}).get("prompts", {}).get("set"))).name
    out = r.output_len or r.max_tokens
    parts = [
        f"dataset {r.dataset or 'shipped'} ({prompts})",
        f"input {r.input_len or 'dataset'}",
        f"output {out} tokens/request"
        if str(out).isdigit()
        else f"output {out} tokens/request (uniform)"
        if ":" in str(out)
        else f"output: {out}",
    ]
    if r.arrival and r.arrival != "closed loop":
        burst = r.burstiness
        parts.append(
            f"{r.arrival} arrivals"
            + (f" (burstiness {burst:g})" if r.arrival == "gamma" and burst is not None else "")
        )
    if r.max_concurrency:
        parts.append(f"at most {r.max_concurrency} in flight")
    if r.duration_target_s:
        parts.append(f"{r.duration_target_s:g} s per level")
    if r.trace_speed not in (None, 1, 1.0):
        parts.append(f"trace at x{r.trace_speed:g} speed")
    if r.stream is False:
        parts.append("not streamed")
    return ", ".join(parts)


def single_level(arms: dict[str, list[Level]]) -> bool:
    """Every arm measured at one level only: a curve over load has nothing to show."""
    return len({r.level[1] for recs in arms.values() for r in recs}) < 2


def require_matplotlib(who: str = "bench plot") -> None:
    """matplotlib is an optional extra: say how to get it instead of a traceback."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(
            f"{who} needs matplotlib, which is not installed.",
            fix="pip install 'sgl-eagle-ext[plot]' (or pip install matplotlib)",
        ) from None


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def image(fig, out: Path | None = None, dpi: int = 100) -> bytes:
    """The figure's image (PNG, or the format `out`'s suffix names), written to `out`
    when given; the figure is closed."""
    buf = io.BytesIO()
    fmt = out.suffix[1:] if out is not None and out.suffix else "png"
    fig.savefig(buf, format=fmt, dpi=dpi)
    pyplot().close(fig)
    if out is not None:
        paths.write_text("-o", out, buf.getvalue())
    return buf.getvalue()


IMAGE_SUFFIXES = (".png", ".svg", ".pdf")  # formats matplotlib writes without extras


def check_out(out: Path | None, *inputs) -> None:
    """-o, checked before anything is read or drawn: never one of the inputs."""
    if out is not None:
        paths.check_writable_file("-o", out, inputs=inputs, suffixes=IMAGE_SUFFIXES)


def render(run_id: str, arms: dict[str, list[Level]], out: Path | None = None) -> bytes:
    import matplotlib.ticker

    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax_tok = axes[0][0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    open_loop = any(r.level[0] == "request_rate" for recs in arms.values() for r in recs)
    for k, (arm, recs) in enumerate(arms.items()):
        color = colors[k % len(colors)]
        xs = [r.level[1] for r in recs]
        ax_tok.plot(xs, [r.output_tok_s for r in recs], "o-", color=color, label=arm)
        for ax, (key, _, scale) in zip((axes[0][1], axes[1][0], axes[1][1]), PANELS):
            for pct, style in (("p50", "o-"), ("p99", "s--")):
                ys = [r.at(key, pct) for r in recs]
                ys = [None if y is None else y * scale for y in ys]
                ax.plot(xs, ys, style, color=color, label=f"{arm} {pct}")
    names = list(arms)
    # Annotate each arm's throughput ratio to the first arm (B/A in an A/B).
    ref = {r.level[1]: r.output_tok_s for r in arms[names[0]]}
    for name in names[1:]:
        for r in arms[name]:
            x = r.level[1]
            base = ref.get(x)
            if base and r.output_tok_s is not None:
                ax_tok.annotate(
                    f"x{r.output_tok_s / base:.2f}",
                    (x, r.output_tok_s),
                    textcoords="offset points",
                    xytext=(0, 8),
                    ha="center",
                    fontsize=8,
                )
    ax_tok.set_title(
        "output throughput" + (f" (ratio to {names[0]} annotated)" if len(names) > 1 else "")
    )
    ax_tok.set_ylabel("output tokens/s")
    for ax, (_, title, _) in zip((axes[0][1], axes[1][0], axes[1][1]), PANELS):
        ax.set_title(f"{title}: p50 solid, p99 dashed")
        ax.set_ylabel(title)
    levels = sorted({r.level[1] for recs in arms.values() for r in recs})
    ax_tok.margins(y=0.15)
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [f"{c:g}" for c in levels])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("request rate (req/s, open loop)" if open_loop else "concurrency")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    first = next(iter(arms.values()))[0]
    server = (first.provenance or {}).get("server", {})
    fig.suptitle(
        shown(
            f"run {run_id}: {' vs '.join(names)}  |  model {server.get('model_path')}  |  "
            f"SGLang {server.get('sglang_version')}\n{load_text(first)}"
        ),
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return image(fig, out, dpi=110)


def plot_run(src: Path, out: Path | None, run_id: str | None, console: Console) -> int:
    """bench plot: one run of `src` (`run_id`, else the latest with sweep records) as a
    PNG at `out` (None: next to `src`)."""
    check_out(out, src)
    recs, problems = records.read_jsonl(src)
    for p in problems:
        console.warn(p)
    run_id, chosen = pick_run(recs, run_id, str(src))
    arms, skipped = series(chosen)
    if not arms:
        raise UserError(
            f"{src}: run {run_id} has no complete level to plot.", fix="pick another --run-id"
        )
    if single_level(arms):
        console.out(
            f"run {run_id} was measured at one level only: a curve over load needs two or "
            f"more, so nothing is drawn (the sweep table holds its figures)"
        )
        return 0
    out = out or src.with_name(f"{src.stem}-{run_id}.png")
    require_matplotlib()  # after the input checks: they need no matplotlib
    render(run_id, arms, out)
    if skipped:
        console.warn(f"left out (partial levels): {', '.join(skipped)}")
    console.out(f"wrote {out} ({', '.join(f'{a}: {len(v)} level(s)' for a, v in arms.items())})")
    return 0
