"""The profile record, writer and reader in one place: the `EAGLE3_PROFILE v=1 ...` log
line and its JSON-lines form (EAGLE3_PROFILE_FILE).

Written by the recorder inside SGLang's processes (recorder/profiler.py, from
recorder/window.summarize), read by the report, `tune` and the benchmarks. Only the
standard library and common/: cheap to import in every scheduler rank.

    line = log_line(rec)               # the log line (no newline)
    text = json_line(rec)              # the JSON line (newline included)
    rec = record_from_line(line)       # either form -> the record dict
    rec = find_record(line)            # None when the line holds no record
    counts = Counts()
    for rec in iter_records(path, counts): ...   # streamed; counts.skipped = bad lines

Log line format (stable; one line per window per profiled rank and (batch size,
draft steps); fields are space-separated key=value, lists are comma-separated
key:count, mean/p50/p90 triplets are slash-separated, times in ms):

  EAGLE3_PROFILE v=1 rank=0 cycles=40 bs=1:40 draft_tokens=16:40 steps=2:40
    cycle_ms=25.10/24.90/27.00 draft_ms=... verify_fwd_ms=... accept_ms=...
    draft_extend_ms=... other_ms=...
    share=draft:4.0,verify_fwd:90.0,accept:2.0,draft_extend:3.0,other:1.0
    accept_len=2.05 accept_hist=1:10,2:20,3:10 tok_s=81.70
    prefill=3/120.00 syncs=0 syncs_counted=device-syncs dropped=0 clock=cuda

(printed on one line). The meaning of each field: recorder/window.py. A record line
may carry a log prefix ("[2026-12-01 10:00:00 TP0] "); the JSON form is the line's
record exactly (plus `accept_len`, `tok_s`, `sync_counted`, `ts`), one object a line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.profiling.names import TAG
from sgl_eagle_ext.profiling.phases import PHASES

FORMAT_VERSION = 1
ROWS = ("cycle", *PHASES, "other")  # the timed rows of a record with cycles
# The one place a log line is recognised as a record ("EAGLE3_PROFILE: ..."
# announcements are not records).
LINE_MARK = TAG + " v="
# Errors a bad line raises while parsed; the readers count it and go on.
BAD_LINE = (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError)


# -- writing -------------------------------------------------------------------
def _mix(counts: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: int(kv[0])))


def _triplet(s: dict) -> str:
    return f"{s['mean']:.2f}/{s['p50']:.2f}/{s['p90']:.2f}"


def log_line(rec: dict) -> str:
    """The record as its log line (no newline)."""
    parts = [
        TAG,
        f"v={rec['v']}",
        f"rank={rec['rank']}",
        f"cycles={rec['cycles']}",
        f"bs={_mix(rec['bs'])}",
        f"draft_tokens={_mix(rec['draft_tokens'])}",
    ]
    if rec.get("steps"):
        parts.append(f"steps={_mix(rec['steps'])}")
    if rec["cycles"]:
        ph = rec["phases"]
        parts.append(f"cycle_ms={_triplet(ph['cycle'])}")
        parts += [f"{p}_ms={_triplet(ph[p])}" for p in (*PHASES, "other")]
        parts.append("share=" + ",".join(f"{p}:{ph[p]['share']:.1f}" for p in (*PHASES, "other")))
        acc = rec.get("accept_len")
        parts.append(f"accept_len={acc:.2f}" if acc is not None else "accept_len=na")
        parts.append(f"accept_hist={_mix(rec['accept_hist'])}")
        tok_s = rec.get("tok_s")
        parts.append(f"tok_s={tok_s:.2f}" if tok_s is not None else "tok_s=na")
    parts.append(f"prefill={rec['prefill']['n']}/{rec['prefill']['ms_mean']:.2f}")
    counted = rec.get("sync_counted", "off")
    parts.append(
        "syncs=off" if counted == "off" else f"syncs={rec['syncs']} syncs_counted={counted}"
    )
    parts += [f"dropped={rec['dropped']}", f"clock={rec['clock']}"]
    return " ".join(parts)


def json_line(rec: dict) -> str:
    """The record as one JSON line (newline included): one write per record, so
    appends from several ranks never interleave."""
    return json.dumps(rec, separators=(",", ":")) + "\n"


# -- reading -------------------------------------------------------------------
def _read_mix(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (p.split(":") for p in text.split(",") if p)}


def _read_triplet(text: str) -> dict:
    mean, p50, p90 = (float(x) for x in text.split("/"))
    return {"mean": mean, "p50": p50, "p90": p90}


def _na_or_float(text: str | None) -> float | None:
    return None if text in (None, "na") else float(text)


def _from_log_line(line: str) -> dict:
    at = line.find(LINE_MARK)
    if at < 0:
        raise ValueError(f"not a {TAG} record line")
    f = dict(tok.split("=", 1) for tok in line[at + len(TAG) :].split())
    rec: dict = {
        "v": int(f["v"]),
        "rank": int(f["rank"]),
        "cycles": int(f["cycles"]),
        "bs": _read_mix(f["bs"]),
        "draft_tokens": _read_mix(f["draft_tokens"]),
    }
    n, ms = f["prefill"].split("/")
    rec["prefill"] = {"n": int(n), "ms_mean": float(ms)}
    rec["steps"] = _read_mix(f.get("steps", ""))  # {}: the worker did not say
    if rec["cycles"]:
        rec["phases"] = {p: _read_triplet(f[f"{p}_ms"]) for p in ROWS}
        for item in f["share"].split(","):
            p, s = item.split(":")
            rec["phases"][p]["share"] = float(s)
        rec["accept_len"] = _na_or_float(f.get("accept_len"))
        rec["accept_hist"] = _read_mix(f["accept_hist"])
        rec["tok_s"] = _na_or_float(f.get("tok_s"))
    rec["syncs"] = 0 if f["syncs"] == "off" else int(f["syncs"])
    rec["sync_counted"] = f.get("syncs_counted", "off")
    rec["dropped"] = int(f["dropped"])
    rec["clock"] = f["clock"]
    return rec


def _from_json_line(line: str) -> dict:
    rec = nesting.json_loads(line)
    if not isinstance(rec, dict):
        raise ValueError("a JSON line that is not an object")
    for key in ("v", "rank", "cycles", "bs", "draft_tokens"):
        rec[key]  # KeyError: not a record
    for key in ("bs", "draft_tokens", "steps", "accept_hist"):
        if rec.get(key) is not None:  # JSON object keys are strings
            rec[key] = {int(k): int(v) for k, v in rec[key].items()}
    if rec["cycles"]:
        for p in ROWS:
            rec["phases"][p]["mean"]
    return rec


def _is_json_record(line: str) -> bool:
    return line.startswith("{") and '"cycles"' in line


def record_from_line(line: str) -> dict:
    """A record line (log or JSON form) -> the record dict, every number finite.
    ValueError (or KeyError, ...: BAD_LINE) when the line is not a whole record."""
    line = line.strip()
    rec = _from_json_line(line) if line.startswith("{") else _from_log_line(line)
    return checked(rec)


def find_record(line: str) -> dict | None:
    """The record on this line, or None when the line holds none (other log output);
    raises BAD_LINE when it holds a truncated or garbled one."""
    line = line.strip()
    if _is_json_record(line) or LINE_MARK in line:
        return record_from_line(line)
    return None


def checked(obj):
    """`obj` if every number in it is finite, else ValueError: one NaN line is
    skipped, never averaged into (and poisoning) what the readers sum."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(v):
            raise ValueError(f"number out of range: {v}")
    return obj


def read_lines(path: Path) -> Iterator[str]:
    """The file's lines without line ends, read as a stream (server logs run to
    gigabytes). UserError when the path cannot be read."""
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"{path}: is a directory.", fix="give the server log file (launcher: logs/*.log)"
        )
    try:
        # a FIFO or a device is refused at once (streamed, but it would never end)
        f = safe_files.open_regular("", path, text=True, errors="replace", missing_raises=True)
        with f:
            for line in f:
                yield line.rstrip("\r\n")
    except OSError as e:
        raise UserError(
            f"{path}: cannot be read: {e.strerror or e}.",
            fix="give the server log file (launcher: logs/*.log)",
        ) from None


@dataclass
class Counts:
    """What a reader saw: whole records, and record lines it skipped (truncated,
    garbled, or holding a non-finite number)."""

    records: int = 0
    skipped: int = 0


def iter_records(source: Path | str | Iterable[str], counts: Counts | None = None):
    """The records of a log or JSON-lines file (a path, streamed) or of lines already
    read, in order. Bad record lines are counted in `counts.skipped` and skipped."""
    counts = counts if counts is not None else Counts()
    lines = read_lines(Path(source)) if isinstance(source, (str, Path)) else source
    for line in lines:
        try:
            rec = find_record(line)
        except BAD_LINE:
            counts.skipped += 1
            continue
        if rec is not None:
            counts.records += 1
            yield rec
