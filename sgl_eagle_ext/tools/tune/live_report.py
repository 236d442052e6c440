"""What tune --live prints and writes from its records: the table, the verdicts, the
crossover, the adaptive table (from the measured cells, by tune's rules), the fixed
preset and the HTML report.

tok/s is the client's output tokens / wall time of the measured rounds (what users
get, prefill included); accept length and cycle ms come from the server's profile
windows of that (batch size, steps). A gain is a cell's tok/s over the steps-0 cell of
the same level (no drafting, on the same server: the in-server baseline).
"""

from __future__ import annotations

from html import escape

from sgl_eagle_ext.common import chain, figures
from sgl_eagle_ext.common.table import Col, Table
from sgl_eagle_ext.launcher import presets
from sgl_eagle_ext.tools.tune import choose

MIN_GAIN = 1.03  # a step count pays only above this (noise margin; tune's --min-gain)


def tok_s(rec: dict) -> float | None:
    return (rec.get("client") or {}).get("output_tok_s")


def grid(cells: list[dict]) -> dict[int, dict[int, dict]]:
    out: dict[int, dict[int, dict]] = {}
    for r in cells:
        out.setdefault(r["level"], {})[r["steps"]] = r
    return dict(sorted(out.items()))


def never_accepted(rec: dict) -> bool:
    """A drafting cell whose windows show no draft token accepted (accept length 1.0):
    it yields what steps 0 yields per cycle, plus the draft's work, so it cannot pay; a
    higher tok/s measured for it is the host's noise (seen on the loaded CPU harness:
    1.12x for a draft that is never accepted)."""
    p = rec.get("profile") or {}
    acc = p.get("accept_len")
    return rec.get("steps", 0) > 0 and bool(p.get("cycles")) and acc is not None and acc <= 1.0


def rated(row: dict[int, dict]) -> dict[int, float]:
    """steps -> measured tok/s of the cells that can pay (never_accepted ones left out)."""
    return {s: t for s, r in row.items() if (t := tok_s(r)) and not never_accepted(r)}


def best(row: dict[int, dict]) -> int | None:
    r = rated(row)
    return max(r, key=r.get) if r else None


def _cell_text(rec: dict | None, star: bool) -> str:
    if rec is None:
        return "-"
    p = rec.get("profile") or {}
    acc, cyc = p.get("accept_len"), p.get("cycle_ms")
    t = tok_s(rec)
    return (
        f"{'-' if t is None else format(t, '.2f')}"
        f" {'-' if acc is None else format(acc, '.2f')}"
        f" {'-' if cyc is None else format(cyc, '.0f')}" + ("*" if star else "")
    )


def table_lines(cells: list[dict], steps: list[int]) -> list[str]:
    g = grid(cells)
    width = max([22, *(len(_cell_text(r, True)) + 2 for row in g.values() for r in row.values())])
    table = Table(
        Col("conc", 5, "d"),
        *(
            Col(f"steps {s}", width, align="^", sep=" |" if i == 0 else "|")
            for i, s in enumerate(steps)
        ),
    )
    rows = []
    for level, row in g.items():
        top = best(row)
        rows.append((level, *(_cell_text(row.get(s), s == top) for s in steps)))
    return [
        "cells: output tok/s, accept length, cycle ms (* = best at that concurrency; "
        "steps 0 = no drafting, the in-server baseline)",
        *table.render(rows, rule="-"),
    ]


ZERO = "0 steps on this server"
BASELINE_ARM = "the baseline server"


def verdicts(
    cells: list[dict], arms: list[dict] | None = None
) -> dict[int, tuple[bool | None, str]]:
    """level -> (drafting pays?, one sentence). Against the baseline server where
    --baseline-arm measured it at that level (the user's question: against the preset
    I would otherwise run), else against 0 steps on this server (a proxy: on a GPU a
    0-step cycle still runs the draft-extend; on the CPU harness it cost 1.7x a plain
    decode step once both ran the same kernels). Each sentence names what it is
    against; with the baseline server both ratios are given."""
    plain = {a["level"]: tok_s(a) for a in arms or () if a.get("arm") == "baseline" and tok_s(a)}
    out = {}
    for level, row in grid(cells).items():
        zero = tok_s(row[0]) if 0 in row else None
        server = plain.get(level)
        base, against = (server, BASELINE_ARM) if server else (zero, ZERO)
        drafting = {s: t for s, t in rated(row).items() if s > 0}
        if base and not drafting and any(s > 0 for s in row):
            out[level] = (False, f"c={level}: do not draft (no draft token was accepted).")
            continue
        if not base or not drafting:
            out[level] = (
                None,
                f"c={level}: not enough cells for a verdict (steps 0 and a drafting cell needed)",
            )
            continue
        s = max(drafting, key=drafting.get)
        gain = drafting[s] / base
        also = ""
        if server and zero:
            also = f"; {drafting[s] / zero:.2f}x against {ZERO} ({zero:.2f} tok/s)"
        name = f"{s} step{'s' * (s > 1)}"
        if gain > MIN_GAIN:
            out[level] = (
                True,
                f"c={level}: {name} pays {gain:.2f}x against {against} "
                f"({drafting[s]:.2f} vs {base:.2f} tok/s){also}.",
            )
        else:
            out[level] = (
                False,
                f"c={level}: do not draft (the best drafting cell, {name}, gives {gain:.2f}x "
                f"against {against}: {drafting[s]:.2f} vs {base:.2f} tok/s){also}.",
            )
    return out


def verdict_basis(cells: list[dict], arms: list[dict] | None = None) -> str:
    """The line above the verdicts: what they are against."""
    measured = sorted({a["level"] for a in arms or () if a.get("arm") == "baseline" and tok_s(a)})
    if not measured:
        return (
            f"verdicts against {ZERO} (the in-server proxy for the baseline preset; "
            "--baseline-arm measures the baseline server itself)"
        )
    levels = sorted(grid(cells))
    rest = [lv for lv in levels if lv not in measured]
    tail = f"; against {ZERO} at c={','.join(map(str, rest))}" if rest else ""
    return f"verdicts against {BASELINE_ARM} (--baseline-arm, same load){tail}"


def crossover_line(v: dict[int, tuple[bool | None, str]]) -> str:
    """The crossover (common/figures.py) of the verdicts, in words."""
    levels = sorted(v)
    x = figures.crossover(levels, pays=[v[lv][0] for lv in levels])
    if x.verdict == "no data":
        return "crossover: not measured"
    if x.verdict == "always":
        return f"crossover: drafting pays at every measured concurrency (up to {x.last_paying})"
    if x.verdict == "never":
        return f"crossover: drafting pays at no measured concurrency (from {x.level})"
    if x.verdict == "until":
        return (
            f"crossover: drafting pays up to {x.last_paying} stream(s); from {x.level} do not draft"
        )
    yes = [lv for lv in levels if v[lv][0]]
    no = [lv for lv in levels if v[lv][0] is False]
    return (
        f"crossover: not monotone: drafting pays at {', '.join(map(str, yes))} and not at "
        f"{', '.join(map(str, no))} (noise, or a host effect: measure again)"
    )


FLOOR_MARGIN = 1.15  # keep 0 steps as the floor at one stream below this gain (tune's)


def pick(level: int, row: dict[int, dict], min_step: int = 0) -> choose.Choice | None:
    """A level's candidate steps from its measured cells, by tune's rules (choose.py):
    the best drafting cell and the cheaper ones that also pay, 0 as the floor when the
    margin is thin or more than one stream shares the batch; [0] when drafting does not
    pay. SGLang's controller climbs to the top candidate while drafts are accepted, so
    the top is the fastest measured cell. Gains are measured tok/s over steps 0."""
    base = tok_s(row[0]) if 0 in row else None
    gains = {s: t / base for s, t in rated(row).items() if s > 0 and base}
    if base and not gains and any(s > 0 for s in row):  # drafts never accepted
        if min_step > 0:
            return choose.Choice(level, [1], None, "no draft accepted; 1 is the least here")
        return choose.Choice(level, [0], None, "no draft token accepted: no draft")
    if not gains:
        return None
    top = max(gains, key=gains.get)
    if gains[top] <= MIN_GAIN:
        shown = f"best drafting {top} steps {gains[top]:.2f}x"
        if min_step > 0:
            return choose.Choice(
                level, [1], None, f"drafting does not pay ({shown}); 1 is the least here"
            )
        return choose.Choice(level, [0], None, f"drafting does not pay ({shown}): no draft")
    ladder = sorted({s for s, g in gains.items() if s <= top and g > MIN_GAIN} | {top})
    if len(ladder) > choose.MAX_CANDIDATES - 1:
        n = choose.MAX_CANDIDATES - 1
        ladder = sorted({ladder[round(i * (len(ladder) - 1) / (n - 1))] for i in range(n)} | {top})
    floor = min_step == 0 and (gains[top] < FLOOR_MARGIN or level > 1)
    why = f"best {top} steps ({gains[top]:.2f}x measured)" + ("; 0 as the floor" if floor else "")
    return choose.Choice(level, ([0] if floor else []) + ladder, None, why)


def adaptive_table(cells: list[dict], min_step: int = 0):
    """(buckets, picks) from the measured cells; only measured step counts are
    candidates (the server prebuilt those, nothing is extrapolated)."""
    picks = {lv: c for lv, row in grid(cells).items() if (c := pick(lv, row, min_step))}
    return choose.buckets(list(picks.values())), picks


def recommended_fixed(cells: list[dict], preset_file: str | None) -> tuple[str, str | None]:
    """(sentence, preset file text or None) for the lowest measured concurrency."""
    g = grid(cells)
    if not g:
        return "no recommendation: nothing measured", None
    level, row = next(iter(g.items()))
    s = best(row)
    if s is None:
        return "no recommendation: nothing measured", None
    if s == 0:
        return (
            f"recommended fixed preset: baseline (no drafting is fastest at {level} stream(s))",
            None,
        )
    text = presets.dumps(
        comment=f"written by tune --live: the fastest fixed chain at {level} stream(s)",
        extends=preset_file or "eagle3-3step",
        server={
            "speculative-eagle-topk": 1,
            "speculative-num-steps": s,
            "speculative-num-draft-tokens": chain.draft_tokens(s),
            "speculative-adaptive": False,
            "speculative-adaptive-config": False,
        },
    )
    return f"recommended fixed preset: a {s}-step chain (fastest at {level} stream(s))", text


def validation_lines(cells: list[dict], validations: list[dict]) -> list[str]:
    g = grid(cells)
    lines = ["validation: the written table under SGLang's own adaptive controller"]
    for v in sorted(validations, key=lambda r: r["level"]):
        row = g.get(v["level"], {})
        s = best(row)
        cell = tok_s(row[s]) if s is not None else None
        again = tok_s(v["reference"]) if v.get("reference") else None
        got = tok_s(v)
        mix = (v.get("profile") or {}).get("steps_mix") or {}
        total = sum(mix.values()) or 1
        ran = ", ".join(f"{k} steps {100 * n / total:.0f}%" for k, n in sorted(mix.items()))
        ratio = f"{got / again:.2f}x" if got and again else "-"
        per_cpu = validation_cpu_ratio(v)
        lines.append(
            f"  c={v['level']}: {got or 0:.2f} tok/s; best cell (steps {s}) "
            f"{'-' if cell is None else f'{cell:.2f}'} tok/s measured, "
            f"{'-' if again is None else f'{again:.2f}'} re-measured alongside: {ratio}"
            + (f" (per server CPU second: {per_cpu:.2f}x)" if per_cpu else "")
            + f"; the controller ran {ran or '-'} of its cycles"
        )
    lines.append(
        "  (each level's adaptive rounds alternate with rounds pinned at its best cell, "
        "A B then B A, so the ratio compares runs under the same host load; where other "
        "work shares the host's CPUs, tokens per CPU second of the server's processes is "
        "the steadier figure)"
    )
    return lines


def validation_cpu_ratio(v: dict) -> float | None:
    """Output tokens per CPU second of the server's processes, adaptive over pinned: on
    a CPU host shared with other work, the figure its neighbours do not move."""
    got = (v.get("client") or {}).get("tok_per_server_cpu_s")
    ref = ((v.get("reference") or {}).get("client") or {}).get("tok_per_server_cpu_s")
    return got / ref if got and ref else None


def cpu_ratio(ours: dict, theirs: dict) -> float | None:
    """Output tokens per server CPU second, ours over theirs (None where not measured)."""
    a = (ours.get("client") or {}).get("tok_per_server_cpu_s")
    b = (theirs.get("client") or {}).get("tok_per_server_cpu_s")
    return a / b if a and b else None


def validation_ratio(v: dict) -> float | None:
    got, ref = tok_s(v), tok_s(v.get("reference") or {})
    return got / ref if got and ref else None


def arm_lines(cells: list[dict], arms: list[dict]) -> list[str]:
    if not arms:
        return []
    g = grid(cells)
    lines = ["separate servers (one load each), same load:"]
    for a in sorted(arms, key=lambda r: (r["arm"], r["level"])):
        zero = g.get(a["level"], {}).get(0)
        ours = tok_s(zero) if zero else None
        t = tok_s(a)
        note = ""
        if a["arm"] == "baseline" and ours and t:
            note = f"; in-server steps 0 / baseline server = {ours / t:.2f}x"
            cpu = cpu_ratio(zero, a)
            note += f" ({cpu:.2f}x per server CPU second)" if cpu else ""
        lines.append(f"  {a['arm']} c={a['level']}: {t or 0:.2f} tok/s{note}")
    return lines


def html(title: str, sections: list[tuple[str, list[str]]]) -> str:
    from sgl_eagle_ext.tools.bench.html_report import STYLE

    body = "".join(
        f"<h2>{escape(h)}</h2><pre>{escape(chr(10).join(lines))}</pre>" for h, lines in sections
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>\n"
    )
