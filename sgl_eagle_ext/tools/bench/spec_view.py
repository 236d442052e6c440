"""Speculation as the workload sees it, and the Pareto chart.

- Accept length per input-length bucket, from the per-request records
  (`--save-requests`): tokens / verify cycles summed over the bucket's requests.
- Acceptance per draft position, named by its convention everywhere (bench
  speculation, bench report, tune): CUMULATIVE (the default, as vLLM's per-position
  acceptance): the share of ALL verify cycles whose draft token at position j was
  accepted (j correct drafts or more); CONDITIONAL (EAGLE's alpha_j, what tune's
  model multiplies): the share of the cycles that accepted drafts 1..j-1 which
  also accepted draft j (cumulative_j / cumulative_j-1). Sources: SGLang's per-request
  `spec_correct_drafts_histogram` (index = correct drafts in one cycle) in the
  per-request records, and the profile windows' histogram as the one aggregator
  gives it (profiling/aggregate.py: also correct drafts per cycle).
- Pareto: per-user speed (1000 / p50 TPOT, tok/s) against total output tok/s, one
  curve per arm over the sweep's levels: "does speculation pay at my load?".

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.common import figures
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.table import Col, Table
from sgl_eagle_ext.profiling import names as profile_names
from sgl_eagle_ext.tools.bench import plot, records, request_log
from sgl_eagle_ext.tools.bench.records import Level, Request

DEFAULT_EDGES = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _bucket_name(lo: int, hi: int | None) -> str:
    def k(n):
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    return f">={k(lo)}" if hi is None else f"{k(lo)}-{k(hi)}"


@dataclass(frozen=True)
class Bucket:
    """The requests whose prompt_tokens fall in [low, high)."""

    bucket: str  # its name, e.g. "4k-8k"
    low: int
    high: int | None
    requests: int
    verify_cycles: int
    accept_length: float | None


@dataclass(frozen=True)
class Point:
    """One level of an arm on the Pareto chart."""

    concurrency: float | None
    request_rate: float | None
    label: str
    total_tok_s: float
    user_tok_s: float  # 1000 / p50 TPOT


def by_input_bucket(rows: list[dict], edges=DEFAULT_EDGES) -> list[Bucket]:
    """Accept length of the requests whose prompt_tokens fall in each bucket."""
    bounds = [0, *edges]
    acc = defaultdict(lambda: [0, 0, 0])  # tokens, verify cycles, requests
    for r in (records.decode(row, Request) for row in rows):
        if not r.ok or not r.verify_ct or r.prompt_tokens is None:
            continue
        i = max(k for k, b in enumerate(bounds) if r.prompt_tokens >= b)
        a = acc[i]
        a[0] += r.completion_tokens or 0
        a[1] += r.verify_ct
        a[2] += 1
    out = []
    for i in sorted(acc):
        tok, ver, n = acc[i]
        hi = bounds[i + 1] if i + 1 < len(bounds) else None
        out.append(
            Bucket(_bucket_name(bounds[i], hi), bounds[i], hi, n, ver, accept.from_counts(tok, ver))
        )
    return out


def hist_from_requests(rows: list[dict]) -> Counter:
    """Verify cycles by correct drafts, summed over the requests' histograms."""
    h = Counter()
    for r in (records.decode(row, Request) for row in rows):
        for k, v in enumerate(r.correct_drafts_histogram or []):
            if v:
                h[k] += int(v)
    return h


def hist_from_profile(paths: list[Path]) -> Counter:
    """Verify cycles by correct drafts from EAGLE3_PROFILE windows (the one aggregator's
    histogram, already in SGLang's convention; warm-up windows left out)."""
    from sgl_eagle_ext.profiling.aggregate import Profile

    h = Counter()
    for cell in Profile.read_all(paths).cells().values():
        h.update(cell.hist)
    return h


CUMULATIVE, CONDITIONAL = "cumulative", "conditional"
CONVENTION = {
    CUMULATIVE: "cumulative: share of all verify cycles that accepted draft j",
    CONDITIONAL: "conditional: share of the cycles that reached draft j which accepted it",
}


position_rates = figures.position_rates  # cumulative and conditional, per position


def views(rows: list[Request], profile_logs) -> tuple[list[Bucket], dict]:
    """Accept length per input-length bucket, and acceptance per draft position by
    source (SGLang's per-request histograms; the profile logs' when given)."""
    positions = {"SGLang per request": position_rates(hist_from_requests(rows))}
    if profile_logs:
        logs = [Path(p) for p in profile_logs]
        positions[profile_names.TAG] = position_rates(hist_from_profile(logs))
    return by_input_bucket(rows), positions


def sections(
    buckets: list[Bucket], positions: dict[str, list[figures.PositionRate]]
) -> list[tuple[str, Table, list[tuple]]]:
    """The tables (bench speculation's, and the HTML report's): (title, table, rows)."""
    out = []
    if buckets:
        t = Table(
            Col("input tokens", 14), Col("requests", 8), Col("verify", 8), Col("accept", 7, ".2f")
        )
        out.append(
            ("", t, [(b.bucket, b.requests, b.verify_cycles, b.accept_length) for b in buckets])
        )
    for source, rates in positions.items():
        if rates:
            title = (
                f"acceptance per draft position ({source}):\n  {CONVENTION[CUMULATIVE]}\n"
                f"  {CONVENTION[CONDITIONAL]}"
            )
            t = Table(
                Col("position", 8),
                Col("cycles accepting it", 19),
                Col(CUMULATIVE, 10),
                Col(CONDITIONAL, 11),
            )
            cells = [
                (r.position, r.accepted_cycles, _pct(r.rate), _pct(r.conditional)) for r in rates
            ]
            out.append((title, t, cells))
    return out


def tables(buckets: list[Bucket], positions: dict[str, list[figures.PositionRate]]) -> list[str]:
    return [
        line
        for title, t, rows in sections(buckets, positions)
        for line in [*title.splitlines(), *t.render(rows)]
    ]


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


# ---------------------------------------------------------------- plots
def render_spec(
    buckets: list[Bucket], positions: dict[str, list[figures.PositionRate]], out=None
) -> bytes:
    plt = plot.pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    if buckets:
        a.bar([x.bucket for x in buckets], [x.accept_length or 0 for x in buckets], color="#4c72b0")
        for i, x in enumerate(buckets):
            a.annotate(
                f"n={x.requests}",
                (i, x.accept_length or 0),
                ha="center",
                textcoords="offset points",
                xytext=(0, 4),
                fontsize=8,
            )
    a.set_title("accept length per input-length bucket")
    a.set_xlabel("prompt tokens")
    a.set_ylabel("tokens per verify cycle")
    for source, rates in positions.items():
        if rates:
            b.plot([r.position for r in rates], [r.rate * 100 for r in rates], "o-", label=source)
    b.set_title("acceptance per draft position (cumulative)")
    b.set_xlabel("draft position")
    b.set_ylabel("% of all verify cycles accepting it")
    b.set_ylim(0, 105)
    b.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions are whole numbers
    if any(positions.values()):
        b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return plot.image(fig, out)


def pareto_points(sweeps: list[Level]) -> dict[str, list[Point]]:
    """Per arm, per level: total output tok/s and per-user tok/s (1000 / p50 TPOT)."""
    arms: dict[str, dict] = defaultdict(dict)
    for r in sweeps:
        if r.kind != "sweep" or r.status in ("interrupted", "server died"):
            continue
        tpot = r.at("tpot_ms", "p50")
        if not tpot or r.output_tok_s is None:
            continue
        arm = plot.arm_name(r)  # drawable text, whatever bytes the label holds
        arms[arm][r.level[1]] = Point(
            r.concurrency,
            r.request_rate,
            f"{r.request_rate:g}/s" if r.request_rate is not None else f"c={r.concurrency}",
            r.output_tok_s,
            figures.tok_s(1, tpot),
        )
    return {a: [lv[k] for k in sorted(lv)] for a, lv in arms.items()}


def render_pareto(points: dict[str, list[Point]], out=None) -> bytes:
    fig, ax = plot.pyplot().subplots(figsize=(7.5, 5.5))
    for arm, pts in points.items():
        ax.plot([p.total_tok_s for p in pts], [p.user_tok_s for p in pts], "o-", label=arm)
        for p in pts:
            ax.annotate(
                p.label,
                (p.total_tok_s, p.user_tok_s),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
    ax.set_xlabel("total output tok/s")
    ax.set_ylabel("tok/s per user (1000 / p50 TPOT)")
    ax.set_title("Pareto: per-user speed against total throughput")
    ax.grid(True, alpha=0.3)
    if points:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return plot.image(fig, out)


def show(src: Path, out: Path | None, profile_logs: list[Path], console) -> int:
    """bench speculation REQUESTS.jsonl [--profile-log LOG ...] [-o PNG]: the tables,
    and the PNG at `out` (None: next to `src`)."""
    plot.check_out(out, src, *profile_logs)
    rows, problems = request_log.read(src)
    for p in problems:
        console.warn(p)
    buckets, positions = views([records.decode(r, Request) for r in rows], profile_logs)
    if not buckets and not any(positions.values()):
        raise UserError(
            f"{src}: no request carries speculation figures (verify cycles).",
            fix="benchmark a speculative server (SGLang streams them per request)",
        )
    plot.require_matplotlib("bench speculation")  # after the input checks: they need none
    for line in tables(buckets, positions):
        console.out(line)
    out = out or src.with_name(f"{src.stem}-speculation.png")
    render_spec(buckets, positions, out)
    console.out(f"wrote {out}")
    return 0
