"""bench report RESULTS.jsonl -o report.html [--requests REQ.jsonl] [--slo ...]

One self-contained HTML file: no script, no stylesheet or font to fetch, every
plot an inline PNG (base64 data URI). Opens from disk in any browser. It holds,
per run: the sweep table of every arm, the A/B verdict, single-stream and lossless
results, the throughput/latency figure, the Pareto chart; from the per-request
records: goodput at the SLO and speculation by input length and draft position;
and the provenance every record carries (already free of secrets).
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from datetime import UTC, datetime
from html import escape

from sgl_eagle_ext.common import figures, paths
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.common.table import text as _n
from sgl_eagle_ext.tools.bench import goodput, level_view, plot, records, request_log, spec_view
from sgl_eagle_ext.tools.bench.commands.report import Options as ReportOptions
from sgl_eagle_ext.tools.bench.records import Level, Request

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}
h3{font-size:1.05em}table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}tr.bad td{background:#fde2e2}
img{max-width:100%;border:1px solid #eee}pre{background:#f7f7f7;padding:.6em;overflow:auto;
font-size:.8em}.note{color:#8a5a00}
"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def sweep_table(sweeps: list[Level]) -> str:
    """The sweep's own table (level_view), one row per level of every arm."""
    goodput = any(v.goodput_tok_s is not None for v in sweeps)
    rows = [[plot.arm_name(v), *level_view.level_cells(v, v.level_text, goodput)] for v in sweeps]
    bad = [v.status not in ("ok", None) for v in sweeps]
    return level_view.level_table(goodput=goodput, arm=True).html(rows, bad)


def _sweep_figure(run_id: str, sweeps: list[Level]) -> str:
    arms, skipped = plot.series(sweeps)
    if not arms:
        return ""
    if plot.single_level(arms):  # one point per arm: the table says it all
        return '<p class="note">one level only: no curve over load to draw</p>'

    png = plot.render(run_id, arms)
    note = (
        f'<p class="note">left out (partial): {escape(", ".join(skipped))}</p>' if skipped else ""
    )
    return _img(png, f"throughput and latency against concurrency, run {run_id}") + note


COMPARE_TABLE = Table(
    L("arm"), L("throughput crossover"), L("goodput crossover"), L("lossless"), L("recommendation")
)
SINGLE_TABLE = Table(
    Col("runs"),
    Col("mean tok/s", fmt=".2f"),
    Col("median", fmt=".2f"),
    Col("95% CI"),
    Col("accept", fmt=".2f"),
    L("status"),
)


def _crossover(record: dict | None) -> str:
    c = figures.Crossover.read(record)
    if c.estimate is not None:
        return f"{c.verdict}, about {c.estimate:.3g} (level {c.level:g})"
    return c.verdict + (f" (level {c.level:g})" if c.level else "")


def run_section(run_id: str, recs: list[dict]) -> str:
    parts = [f"<h2>Run {escape(str(run_id))}</h2>"]
    typed = [records.decode(r) for r in recs]
    by_kind = defaultdict(list)  # each record kind's typed class -> its records
    for t in typed:
        by_kind[type(t)].append(t)
    for ab in by_kind[records.AB]:
        parts.append(
            f"<h3>A/B: {escape(str(ab.preset_a))} (A) vs {escape(str(ab.preset_b))} (B)</h3>"
            f"<p>verdict: <b>{escape(str(ab.verdict))}</b>; throughput crossover: "
            f"{escape(_crossover(ab.crossover_throughput))}; lossless: "
            f"{escape(str(ab.lossless))}</p><p>recommendation: "
            f"{escape(str(ab.recommendation))}</p>"
        )
    for cmp in by_kind[records.Compare]:
        rows = [
            [
                name,
                _crossover(x),
                _crossover(good) if (good := (cmp.crossover_goodput or {}).get(name)) else "-",
                (cmp.lossless or {}).get(name),
                (cmp.recommendation or {}).get(name),
            ]
            for name, x in (cmp.crossover_throughput or {}).items()
        ]
        parts.append(
            f"<h3>Compare: {escape(' vs '.join(map(str, cmp.arms or [])))} "
            f"(reference {escape(str(cmp.reference))})</h3>"
            + COMPARE_TABLE.html(rows)
            + "".join(
                f'<p class="note">not compared: {escape(str(n))} failed ({escape(str(why))})</p>'
                for n, why in (cmp.failed_arms or {}).items()
            )
        )
    sweeps = [t for t in by_kind[Level] if t.kind == "sweep"]
    if sweeps:
        load = escape(plot.load_text(sweeps[0]))
        parts.append(f"<h3>Sweep</h3><p>load: {load}</p>" + sweep_table(sweeps))
        parts.append(_sweep_figure(run_id, sweeps))
        pts = spec_view.pareto_points(sweeps)
        if pts and max(len(v) for v in pts.values()) > 1:  # a curve, not single points
            parts.append("<h3>Pareto</h3>" + _img(spec_view.render_pareto(pts), "Pareto chart"))
    one_stream = [t for t in by_kind[Level] if t.shape == "single"]  # bench single's
    for s in by_kind[records.Single] + one_stream:
        lo, hi = s.at("tok_s", "ci95_low"), s.at("tok_s", "ci95_high")
        ci = "-" if lo is None and hi is None else f"{_n(lo, '{:.2f}')}..{_n(hi, '{:.2f}')}"
        row = [s.at("tok_s", "n"), s.at("tok_s", "mean"), s.at("tok_s", "median"), ci]
        parts.append(
            f"<h3>Single stream ({escape(str(s.arm or s.url))})</h3>"
            + SINGLE_TABLE.html([[*row, s.accept_length, s.status]])
        )
    for ll in by_kind[records.Lossless]:
        parts.append(
            f"<h3>Lossless</h3><p>verdict: <b>{escape(str(ll.verdict))}</b> "
            f"({escape(str(ll.identical))}/{escape(str(ll.compared))} identical)</p>"
        )
    prov = {}
    for t in typed:
        prov.setdefault(str(plot.arm_name(t) if t.kind == "sweep" else t.kind), t.provenance)
    for name, p in prov.items():
        parts.append(
            f"<details><summary>provenance: {escape(name)}</summary><pre>"
            f"{escape(json.dumps(p, indent=1, default=str), quote=False)}</pre></details>"
        )
    return "\n".join(parts)


def requests_section(rows: list[dict], slo: dict, percentiles, profile_logs) -> str:
    parts = ["<h2>Per-request records</h2>"]
    rows = [records.decode(r, Request) for r in rows]  # once, for every view below
    t, cells = goodput.table(goodput.compute(rows, slo, percentiles), slo, percentiles)
    parts.append(f"<p>SLO: {escape(goodput.describe_slo(slo))}</p>" + t.html(cells))
    buckets, positions = spec_view.views(rows, profile_logs)
    if buckets or any(positions.values()):
        parts.append("<h3>Speculation by workload</h3>")
        for title, t, cells in spec_view.sections(buckets, positions):
            title = escape(title).replace("\n", "<br>")
            parts.append((f"<p>{title}</p>" if title else "") + t.html(cells))
        parts.append(_img(spec_view.render_spec(buckets, positions), "speculation by workload"))
    return "\n".join(parts)


def write_report(opts: ReportOptions, console) -> int:
    """bench report: the records of RESULTS (and the per-request records of --requests)
    as one HTML file at -o (default: next to RESULTS, .html)."""
    src, out = opts.results, opts.output or opts.results.with_suffix(".html")
    paths.check_writable_file("-o", out, inputs=(src, opts.requests, *opts.profile_logs))
    if opts.profile_logs and opts.requests is None:
        raise UserError("--profile-log is read with --requests.", fix="add --requests FILE")
    recs, problems = records.read_jsonl(src)
    for p in problems:
        console.warn(p)
    if not recs:
        raise UserError(f"{src}: no bench records.", fix="give the JSONL `bench` wrote")
    rows = None
    if opts.requests is not None:
        rows, more = request_log.read(opts.requests)
        for p in more:
            console.warn(p)
    plot.require_matplotlib("bench report")  # after the input checks: they need none
    slo, percentiles = goodput.parse_slo(opts.slo), goodput.parse_percentiles(opts.percentiles)
    runs = defaultdict(list)
    for r in recs:
        runs[r.get("run_id")].append(r)
    if opts.run_id is not None:
        if opts.run_id not in runs:
            raise UserError(f"{src}: no records of run {opts.run_id}.", fix="check --run-id")
        runs = {opts.run_id: runs[opts.run_id]}
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        "<h1>sgl-eagle-ext benchmark report</h1>",
        f"<p>source: <code>{escape(str(src))}</code>; {len(recs)} record(s), "
        f"{len(runs)} run(s); written {now}</p>",
    ]
    if problems:
        body.append('<p class="note">skipped lines: ' + escape("; ".join(problems[:10])) + "</p>")
    for rid in reversed(list(runs)):  # the latest run first
        body.append(run_section(rid, runs[rid]))
    if rows:
        body.append(requests_section(rows, slo, percentiles, opts.profile_logs))
    html = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>benchmark report: {escape(src.name)}</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
    # a non-UTF-8 label: its own bytes back (surrogateescape)
    paths.write_text("-o", out, html, errors="surrogateescape")
    console.out(f"wrote {out} ({len(html) // 1024} KiB, self-contained: open it in a browser)")
    return 0
