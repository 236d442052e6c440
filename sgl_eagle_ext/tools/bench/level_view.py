"""A level as printed: the sweep's table row, the line of what bench_serving
prints beside it, and the notes (errors, short requests, a busy client, late sends).
Every reader takes the typed record view (records.Level)."""

from __future__ import annotations

from sgl_eagle_ext.common.table import Col, L, Table
from sgl_eagle_ext.tools.bench import records
from sgl_eagle_ext.tools.bench.loads import CONCURRENCY, RATE, Axis

CLIENT_BUSY = 0.9  # warn when the client itself used more than this share of a core
LATE_SEND_MS = 50.0  # open loop: warn when sends lag their schedule by more (p99)
CLIENT_LATE_BUSY = 0.5  # ... and blame the client only when it was this busy


def _trio(block: dict, scale: float = 1.0, fmt: str = "{:.0f}") -> str:
    if not block or block.get("p50") is None:
        return "-"
    return "/".join(fmt.format(block[p] * scale) for p in ("p50", "p90", "p99"))


def level_table(axis: Axis = CONCURRENCY, goodput: bool = False, arm: bool = False) -> Table:
    """The sweep's table, printed a row at a time as each level finishes (with an arm
    column and the level in words: the HTML report's)."""
    return Table(
        *([L("arm", 10)] if arm else []),
        Col("level" if arm else "rate" if axis is RATE else "conc", 5, "g"),
        Col("done", 5),
        Col("err", 4),
        Col("short", 5),
        Col("out tok/s", 10, ".1f"),
        Col("req/s", 7, ".2f"),
        Col("TTFT ms p50/90/99", 18),
        Col("TPOT ms p50/90/99", 18),
        Col("ITL ms p50/90/99", 18),
        Col("E2E s p50/90/99", 16),
        Col("tok/chunk", 9, ".2f"),
        Col("accept", 6, ".2f"),
        *([Col("goodput tok/s", 13, ".1f")] if goodput else []),
        L("status", sep="  "),
    )


def view(f: dict | records.Level) -> records.Level:
    """A level's fields as the typed record view the tables and notes read."""
    return records.decode(f, records.Level)


def status_text(f: dict | records.Level) -> str:
    """The status column: a level cut short by a dead server must not look like a row."""
    v = view(f)
    if v.status == "server died":
        return (
            f"SERVER DIED: cut short ({v.requests} sent, "
            f"{v.not_sent or 0} never sent, {v.completed} done)"
        )
    if v.status == "interrupted":
        return f"INTERRUPTED ({v.completed} done)"
    return v.status or "ok"


def level_cells(v: records.Level, level, goodput: bool) -> list:
    """One level's cells of level_table (`level`: its value, or its words)."""
    return [
        level,
        v.completed,
        v.error_count,
        v.short,
        v.output_tok_s,
        v.request_s,
        _trio(v.ttft_ms),
        _trio(v.tpot_ms, fmt="{:.1f}"),
        _trio(v.itl_ms, fmt="{:.1f}"),
        _trio(v.e2e_ms, 1e-3, "{:.2f}"),
        v.tokens_per_chunk,
        v.accept_length,
        *([v.goodput_tok_s] if goodput else []),
        status_text(v),
    ]


def table_row(f: dict | records.Level, concurrency: float) -> str:
    v = view(f)
    goodput = v.goodput_tok_s is not None or v.slo_attainment is not None
    return level_table(CONCURRENCY, goodput).row(*level_cells(v, concurrency, goodput))


def field_line(f: dict | records.Level, at: str) -> str:
    """What sglang.bench_serving prints that the table does not: ITL std/p95/max, the
    peaks, SLO attainment per goal, and vLLM's chosen percentiles."""

    def ms(x):
        return "-" if x is None else f"{x:.1f}"

    v = view(f)
    parts = [
        f"ITL ms std {ms(v.at('itl_ms', 'std'))} p95 {ms(v.at('itl_ms', 'p95'))} "
        f"max {ms(v.at('itl_ms', 'max'))}",
        f"peak {ms(v.peak_output_tok_s)} output tok/s, "
        f"peak {v.peak_concurrency or 0} requests in flight within one second",
    ]
    if (v.at("tok_s", "n") or 0) >= 2:  # one stream: its requests as repeated runs
        parts.append(
            f"one stream: tok/s mean {ms(v.at('tok_s', 'mean'))}, 95% CI "
            f"{ms(v.at('tok_s', 'ci95_low'))}..{ms(v.at('tok_s', 'ci95_high'))} over "
            f"{v.at('tok_s', 'n')} runs"
        )
    if v.slo_attainment is not None:
        each = ", ".join(
            f"{k.removesuffix('_ms')} {x * 100:.1f}%"
            for k, x in (v.slo_attainment_by_metric or {}).items()
        )
        parts.append(f"SLO attainment {v.slo_attainment * 100:.1f}% ({each})")
    for m, block in (v.metric_percentiles or {}).items():
        parts.append(f"{m.upper()} ms " + " ".join(f"{p} {ms(x)}" for p, x in block.items()))
    return f"  {at}: " + "; ".join(parts)


def level_notes(f: dict, concurrency: float, axis: Axis = CONCURRENCY) -> list[str]:
    notes = []
    at = axis.tag(concurrency)
    v = view(f)
    if v.errors:
        shown = ", ".join(f"{n} x {k}" for k, n in sorted(v.errors.items()))
        example = f"; e.g. {v.error_examples[0]}" if v.error_examples else ""
        notes.append(f"{at}: {v.error_count} failed request(s): {shown}{example}")
    if v.short:
        example = f", e.g. {v.short_examples[0]}" if v.short_examples else ""
        notes.append(f"{at}: {v.short} request(s) came back short{example}")
    if v.malformed_chunks:
        notes.append(f"{at}: {v.malformed_chunks} malformed stream chunk(s) skipped")
    if v.tokens_estimated:
        notes.append(
            f"{at}: {v.tokens_estimated} request(s) had no usage chunk: tokens counted as chunks"
        )
    if (v.client_busy or 0) > CLIENT_BUSY and (v.duration_s or 0) > 1:
        notes.append(
            f"{at}: this client used {v.client_busy * 100:.0f}% of a CPU "
            f"core: it may be what limits the figures (a busier host, or more streams "
            f"than one core can drive)"
        )
    notes += late_send_notes(v, at)
    closed = "request_rate" not in f  # a burst's request_rate is null, yet it is open loop
    if v.duration_target_s and v.steady_state_note and closed:
        notes.append(f"{at}: {v.steady_state_note}")
    if v.other_traffic:
        notes.append(f"{at}: {v.other_traffic}")
    return notes


def late_send_notes(f: dict | records.Level, at: str) -> list[str]:
    """Open loop: sends that went out late, blamed on the client only when it was the
    cause (busy CLIENT_LATE_BUSY of a core or more). A lag with the client idle is the
    host's (other processes) and stays in the record (send_lag_ms) without a warning.
    Over few sends the p99 is their maximum: the note says how many."""
    v = view(f)
    lag, busy = v.at("send_lag_ms", "p99"), v.client_busy
    if lag is None or lag <= LATE_SEND_MS or busy is None or busy < CLIENT_LATE_BUSY:
        return []
    sends = v.arrivals or v.requests or 0
    of = f"p99 of {sends} sends" if sends >= 100 else f"the latest of {sends} sends"
    return [
        f"{at}: sends went out up to {lag:.0f} ms ({of}) after their scheduled arrival, "
        f"with this client {busy * 100:.0f}% busy: the client could not keep this rate"
    ]
