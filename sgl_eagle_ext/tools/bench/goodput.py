"""bench goodput FILE --slo ttft=500,tpot=50 [--percentiles 50,90,99]

Recomputes, from the per-request records of `--save-requests`, each level's
latency percentiles and its goodput: output tok/s and req/s of the requests that
met every goal of the SLO (ms). A level lasts from its first send to its last
answer, as in the sweep.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass

import numpy as np

from sgl_eagle_ext.common import accept_length as accept
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.common.table import text as _n
from sgl_eagle_ext.tools.bench import records, request_log
from sgl_eagle_ext.tools.bench.commands.goodput import Options as GoodputOptions
from sgl_eagle_ext.tools.bench.loads import SLO
from sgl_eagle_ext.tools.bench.records import Request

METRICS = ("ttft", "tpot", "itl", "e2e")
ALIASES = {"e2el": "e2e"}  # sglang.bench_serving's and vLLM's name for E2E latency
SLO_FIX = (
    "e.g. --slo ttft=500,tpot=50 or --slo ttft:500 tpot:50 (sglang.bench_serving's "
    "--goodput); milliseconds; keys ttft, tpot, itl, e2e (or e2el)"
)
DEFAULT_PERCENTILES = (50, 90, 99)


def parse_slo(text: str | list[str] | None) -> dict[str, float]:
    """Latency goals in ms: `ttft=500,tpot=50` (this tool's) or `ttft:500 tpot:50`
    (sglang.bench_serving's and vLLM's --goodput: KEY:VALUE words), or a mix."""
    if not text:
        return {}
    parts = [text] if isinstance(text, str) else list(text)
    shown = " ".join(parts)
    words = [w for part in parts for w in part.replace(",", " ").split()]
    out = {}
    i = 0
    while i < len(words):
        word = words[i]
        cut = min((k for k in (word.find("="), word.find(":")) if k >= 0), default=-1)
        if cut == len(word) - 1 and i + 1 < len(words):  # "ttft: 500"
            word, i = word + words[i + 1], i + 1
        i += 1
        if cut <= 0:
            raise UserError(f"--slo {shown}: {word!r} is not KEY=MS or KEY:MS.", fix=SLO_FIX)
        key, value = word[:cut].strip().lower().removesuffix("_ms"), word[cut + 1 :]
        key = ALIASES.get(key, key)
        if key not in METRICS:
            raise UserError(
                f"--slo {shown}: unknown goal {word[:cut]!r} (keys: ttft, tpot, itl, e2e or e2el).",
                fix=SLO_FIX,
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise UserError(f"--slo {shown}: {value!r} is not a number.", fix=SLO_FIX) from None
        if not 0 < out[key] < float("inf"):
            raise UserError(f"--slo {shown}: {key} must be a number > 0 (ms).", fix=SLO_FIX)
    return out


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    if not text:
        return DEFAULT_PERCENTILES
    try:
        ps = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        ps = ()
    if not ps or any(not 0 <= p <= 100 for p in ps):
        raise UserError(
            f"--percentiles {text}: not a list of numbers in 0..100.", fix="e.g. 50,90,99,99.9"
        )
    return ps


def _pname(p: float) -> str:
    return f"p{p:g}"


def meets(row: Request, slo: SLO) -> bool:
    """The sweep's goodput rule (loads.SLO.met_by) on a per-request record."""
    return slo.met_by(row.ok, row.ttft_ms, row.tpot_ms, row.e2e_ms, row.itl_ms or [])


def group_key(row: Request) -> tuple:
    level = row.concurrency
    if level is None and row.request_rate is not None:
        level = f"rate {row.request_rate:g}"
    return (row.run_id, row.arm or "", level)


def _tokens(rows: list[Request]) -> int:
    return sum(r.completion_tokens or 0 for r in rows)


@dataclass(frozen=True)
class Figures:
    """One (run, arm, level) group's figures recomputed from its requests."""

    requests: int
    completed: int
    duration_s: float | None
    output_tok_s: float | None
    ttft_ms: dict  # percentile name -> ms (the --percentiles asked for)
    tpot_ms: dict
    itl_ms: dict
    e2e_ms: dict
    accept_length: float | None  # decode-only, as the sweep's (SGLang's /server_info)
    accept_length_with_prefill: float | None
    slo_met: int | None = None  # with an SLO only
    slo_met_share: float | None = None
    goodput_req_s: float | None = None
    goodput_tok_s: float | None = None

    def latency(self, metric: str) -> dict:
        return getattr(self, f"{metric}_ms")


def level_figures(rows: list[Request], slo: dict, percentiles) -> Figures:
    ok = [r for r in rows if r.ok]
    ends = [
        r.start_s + r.e2e_ms / 1e3 for r in rows if r.start_s is not None and r.e2e_ms is not None
    ]
    starts = [r.start_s for r in rows if r.start_s is not None]
    duration = max(ends) - min(starts) if ends and starts else None
    if not duration:
        duration = next((r.level_duration_s for r in rows), None)
    latency = {}
    for m in METRICS:
        if m == "itl":
            vals = [g for r in ok for g in (r.itl_ms or [])]
        else:
            vals = [v for r in ok if (v := getattr(r, f"{m}_ms")) is not None]
        latency[f"{m}_ms"] = {
            _pname(p): (float(np.percentile(vals, p)) if vals else None) for p in percentiles
        }
    acc = [r for r in ok if r.verify_ct and r.completion_tokens is not None]
    tokens, cycles = _tokens(acc), sum(r.verify_ct for r in acc)
    good = {}
    if slo:
        goals = SLO.of(slo)
        met = [r for r in rows if meets(r, goals)]
        good = {
            "slo_met": len(met),
            "slo_met_share": len(met) / len(rows) if rows else None,
            "goodput_req_s": len(met) / duration if duration else None,
            "goodput_tok_s": _tokens(met) / duration if duration else None,
        }
    return Figures(
        requests=len(rows),
        completed=len(ok),
        duration_s=duration,
        output_tok_s=_tokens(ok) / duration if duration else None,
        **latency,
        accept_length=accept.decode_only(tokens, cycles, len(acc)),
        accept_length_with_prefill=accept.from_counts(tokens, cycles),
        **good,
    )


def compute(rows: list[dict], slo: dict, percentiles) -> list[tuple[tuple, Figures]]:
    """Figures per (run, arm, level) of per-request records (request_log.read's)."""
    groups: dict[tuple, list[Request]] = defaultdict(list)
    for r in rows:
        typed = records.decode(r, Request)
        groups[group_key(typed)].append(typed)

    def order(k):
        run, arm, level = k
        return (str(run), arm, (0, level) if isinstance(level, (int, float)) else (1, str(level)))

    return [(k, level_figures(groups[k], slo, percentiles)) for k in sorted(groups, key=order)]


def table(results, slo: dict, percentiles) -> tuple[Table, list[list]]:
    """The goodput table, printed by bench goodput and shown by the HTML report."""
    ps = [_pname(p) for p in percentiles]
    lat = "/".join(p.removeprefix("p") for p in ps)
    cols = [
        L("arm", 14),
        Col("level", 8),
        Col("done", 5),
        Col("tok/s", 9, ".1f"),
        Col("TTFT ms p" + lat, 22),
        Col("TPOT ms p" + lat, 22),
        Col("E2E ms p" + lat, 22),
        Col("accept", 6, ".2f"),
    ]
    if slo:
        cols += [Col("SLO met", 9), Col("good tok/s", 10, ".1f"), Col("good req/s", 10, ".2f")]

    def trio(f: Figures, m):
        return "/".join(_n(f.latency(m)[p], "{:.0f}") for p in ps)

    rows = []
    for (_run, arm, level), f in results:
        row = [
            (arm or "-")[:14],
            str(level),
            f.completed,
            f.output_tok_s,
            trio(f, "ttft"),
            trio(f, "tpot"),
            trio(f, "e2e"),
            f.accept_length,
        ]
        if slo:
            row += [f"{f.slo_met}/{f.requests}", f.goodput_tok_s, f.goodput_req_s]
        rows.append(row)
    return Table(*cols), rows


def _shown(f: Figures) -> dict:
    """The JSON output's fields: the SLO's only with an SLO (as before they were typed)."""
    out = asdict(f)
    if f.slo_met is None:
        for name in ("slo_met", "slo_met_share", "goodput_req_s", "goodput_tok_s"):
            del out[name]
    return out


def describe_slo(slo: dict) -> str:
    return " and ".join(f"{k.upper()} <= {v:g} ms" for k, v in slo.items()) or "none"


def report(opts: GoodputOptions, console) -> int:
    """bench goodput: FILE's requests (those of --run-id when given) against the goals
    of --slo, at --percentiles (both parsed here, after the file's problems are printed)."""
    src = opts.file
    rows, problems = request_log.read(src)
    for p in problems:
        console.warn(p)
    slo = parse_slo(opts.slo)
    ps = parse_percentiles(opts.percentiles)
    if opts.run_id:
        rows = [r for r in rows if r.get("run_id") == opts.run_id]
        if not rows:
            raise UserError(f"{src}: no requests of run {opts.run_id}.", fix="check --run-id")
    results = compute(rows, slo, ps)
    console.out(f"{len(rows)} request(s) from {src}; SLO: {describe_slo(slo)}")
    t, cells = table(results, slo, ps)
    for line in t.render(cells):
        console.out(line)
    if opts.json:
        import json

        console.out(
            json.dumps(
                [{"run_id": k[0], "arm": k[1], "level": k[2], **_shown(f)} for k, f in results],
                indent=1,
            )
        )
    return 0
