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
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from sgl_eagle_ext.common import figures, paths
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.table import text as _n
from sgl_eagle_ext.profiling import names as profile_names
from sgl_eagle_ext.tools.bench import goodput, plot, records, request_log, spec_view
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


def _table(head: list[str], rows: list[list], bad: list[bool] | None = None) -> str:
    out = ["<table><tr>"]
    out += [f'<th class="{"l" if i == 0 else ""}">{escape(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr>")
    for k, row in enumerate(rows):
        cls = ' class="bad"' if bad and bad[k] else ""
        cells = "".join(
            f'<td class="{"l" if i == 0 else ""}">{escape(str(c))}</td>' for i, c in enumerate(row)
        )
        out.append(f"<tr{cls}>{cells}</tr>")
    out.append("</table>")
    return "".join(out)


def _trio(r: Level, block: str, scale=1.0, fmt="{:.0f}") -> str:
    if r.at(block, "p50") is None:
        return "-"
    vals = (r.at(block, p) for p in ("p50", "p90", "p99"))
    return "/".join("-" if v is None else fmt.format(v * scale) for v in vals)


SWEEP_HEAD = [
    "arm",
    "level",
    "status",
    "done",
    "errors",
    "out tok/s",
    "req/s",
    "TTFT ms p50/90/99",
    "TPOT ms p50/90/99",
    "E2E s p50/90/99",
    "accept",
    "goodput tok/s",
]


def sweep_rows(sweeps: list[Level]) -> tuple[list[list], list[bool]]:
    rows = [
        [
            plot.arm_name(r),
            r.level_text,
            r.status,
            r.completed,
            r.error_count,
            _n(r.output_tok_s),
            _n(r.request_s, "{:.2f}"),
            _trio(r, "ttft_ms"),
            _trio(r, "tpot_ms", fmt="{:.1f}"),
            _trio(r, "e2e_ms", 1e-3, "{:.2f}"),
            _n(r.accept_length, "{:.2f}"),
            _n(r.goodput_tok_s),
        ]
        for r in sweeps
    ]
    return rows, [r.status not in ("ok", None) for r in sweeps]


def _sweep_figure(run_id: str, sweeps: list[Level]) -> str:
    arms, skipped = plot.series(sweeps)
    if not arms:
        return ""
    if plot.single_level(arms):  # one point per arm: the table says it all
        return '<p class="note">one level only: no curve over load to draw</p>'

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.png"
        plot.render(run_id, arms, out)
        png = out.read_bytes()
    note = (
        f'<p class="note">left out (partial): {escape(", ".join(skipped))}</p>' if skipped else ""
    )
    return _img(png, f"throughput and latency against concurrency, run {run_id}") + note


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
        rows = []
        for name, x in (cmp.crossover_throughput or {}).items():
            good = (cmp.crossover_goodput or {}).get(name) or {}
            ll = (cmp.lossless or {}).get(name)
            advice = (cmp.recommendation or {}).get(name) or "-"
            rows.append([name, _crossover(x), _crossover(good) if good else "-", ll or "-", advice])
        parts.append(
            f"<h3>Compare: {escape(' vs '.join(map(str, cmp.arms or [])))} "
            f"(reference {escape(str(cmp.reference))})</h3>"
            + _table(
                ["arm", "throughput crossover", "goodput crossover", "lossless", "recommendation"],
                rows,
            )
            + "".join(
                f'<p class="note">not compared: {escape(str(n))} failed ({escape(str(why))})</p>'
                for n, why in (cmp.failed_arms or {}).items()
            )
        )
    sweeps = [t for t in by_kind[Level] if t.kind == "sweep"]
    if sweeps:
        rows, bad = sweep_rows(sweeps)
        parts.append(
            f"<h3>Sweep</h3><p>load: {escape(plot.load_text(sweeps[0]))}</p>"
            + _table(SWEEP_HEAD, rows, bad)
        )
        parts.append(_sweep_figure(run_id, sweeps))
        pts = spec_view.pareto_points(sweeps)
        if pts and max(len(v) for v in pts.values()) > 1:  # a curve, not single points
            parts.append("<h3>Pareto</h3>" + _img(spec_view.render_pareto(pts), "Pareto chart"))
    one_stream = [t for t in by_kind[Level] if t.shape == "single"]  # bench single's
    for s in by_kind[records.Single] + one_stream:
        parts.append(
            f"<h3>Single stream ({escape(str(s.arm or s.url))})</h3>"
            + _table(
                ["runs", "mean tok/s", "median", "95% CI", "accept", "status"],
                [
                    [
                        s.at("tok_s", "n"),
                        _n(s.at("tok_s", "mean"), "{:.2f}"),
                        _n(s.at("tok_s", "median"), "{:.2f}"),
                        f"{_n(s.at('tok_s', 'ci95_low'), '{:.2f}')}.."
                        f"{_n(s.at('tok_s', 'ci95_high'), '{:.2f}')}",
                        _n(s.accept_length, "{:.2f}"),
                        s.status,
                    ]
                ],
            )
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
    res = goodput.compute(rows, slo, percentiles)
    ps = [goodput._pname(p) for p in percentiles]
    head = ["arm", "level", "done", "tok/s"]
    head += [f"{m.upper()} ms {'/'.join(ps)}" for m in ("ttft", "tpot", "e2e")]
    head += ["accept"]
    if slo:
        head += ["SLO met", "goodput tok/s", "goodput req/s"]
    body = []
    for (_run, arm, level), f in res:
        row = [arm or "-", level, f.completed, _n(f.output_tok_s)]
        row += [
            "/".join(_n(f.latency(m)[p], "{:.0f}") for p in ps) for m in ("ttft", "tpot", "e2e")
        ]
        row += [_n(f.accept_length, "{:.2f}")]
        if slo:
            row += [f"{f.slo_met}/{f.requests}", _n(f.goodput_tok_s), _n(f.goodput_req_s, "{:.2f}")]
        body.append(row)
    parts.append(f"<p>SLO: {escape(goodput.describe_slo(slo))}</p>" + _table(head, body))
    buckets = spec_view.by_input_bucket(rows)
    positions = {"SGLang per request": spec_view.position_rates(spec_view.hist_from_requests(rows))}
    if profile_logs:
        positions[profile_names.TAG] = spec_view.position_rates(
            spec_view.hist_from_profile([Path(p) for p in profile_logs])
        )
    if buckets or any(positions.values()):
        parts.append("<h3>Speculation by workload</h3>")
        if buckets:
            parts.append(
                _table(
                    ["input tokens", "requests", "verify cycles", "accept length"],
                    [
                        [b.bucket, b.requests, b.verify_cycles, _n(b.accept_length, "{:.2f}")]
                        for b in buckets
                    ],
                )
            )
        for source, rates in positions.items():
            if rates:
                parts.append(
                    f"<p>acceptance per draft position ({escape(source)}); cumulative: "
                    f"share of all verify cycles that accepted draft j; conditional: share of "
                    f"the cycles that reached draft j which accepted it:</p>"
                    + _table(
                        ["position", "cycles accepting it", "cumulative", "conditional"],
                        [
                            [
                                r.position,
                                r.accepted_cycles,
                                f"{r.rate * 100:.1f}%",
                                spec_view._pct(r.conditional),
                            ]
                            for r in rates
                        ],
                    )
                )
        parts.append(_img(spec_view.render_spec(buckets, positions), "speculation by workload"))
    return "\n".join(parts)


def build(
    recs: list[dict],
    source: str,
    *,
    run_id: str | None = None,
    request_rows: list[dict] | None = None,
    slo: dict | None = None,
    percentiles=goodput.DEFAULT_PERCENTILES,
    profile_logs=(),
    problems=(),
) -> str:
    runs = defaultdict(list)
    for r in recs:
        runs[r.get("run_id")].append(r)
    if run_id is not None:
        if run_id not in runs:
            raise UserError(f"{source}: no records of run {run_id}.", fix="check --run-id")
        runs = {run_id: runs[run_id]}
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = [
        "<h1>sgl-eagle-ext benchmark report</h1>",
        f"<p>source: <code>{escape(source)}</code>; {len(recs)} record(s), "
        f"{len(runs)} run(s); written {now}</p>",
    ]
    if problems:
        body.append(
            '<p class="note">skipped lines: ' + escape("; ".join(list(problems)[:10])) + "</p>"
        )
    for rid in reversed(list(runs)):  # the latest run first
        body.append(run_section(rid, runs[rid]))
    if request_rows:
        body.append(requests_section(request_rows, slo or {}, percentiles, profile_logs))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>benchmark report: {escape(Path(source).name)}</title>"
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_report(
    src: Path,
    out: Path | None,
    console,
    *,
    run_id: str | None,
    requests: Path | None,
    slo_text: str | None,
    percentiles_text: str,
    profile_logs: Sequence[str],
) -> int:
    """bench report: `src`'s records (and the per-request records in `requests`) as one
    HTML file at `out` (None: next to `src`, .html)."""
    recs, problems = records.read_jsonl(src)
    for p in problems:
        console.warn(p)
    if not recs:
        raise UserError(f"{src}: no bench records.", fix="give the JSONL `bench` wrote")
    rows = None
    if requests is not None:
        rows, more = request_log.read(requests)
        for p in more:
            console.warn(p)
    plot.require_matplotlib("bench report")  # after the input checks: they need none
    html = build(
        recs,
        str(src),
        run_id=run_id,
        request_rows=rows,
        slo=goodput.parse_slo(slo_text),
        percentiles=goodput.parse_percentiles(percentiles_text),
        profile_logs=profile_logs,
        problems=problems,
    )
    out = out or src.with_suffix(".html")
    # a non-UTF-8 label: its own bytes back (surrogateescape)
    paths.write_text("-o", out, html, errors="surrogateescape")
    console.out(f"wrote {out} ({len(html) // 1024} KiB, self-contained: open it in a browser)")
    return 0
