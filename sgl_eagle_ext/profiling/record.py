"""The profile record, writer and reader in one place: the `EAGLE3_PROFILE v=2 ...` log
line and its JSON-lines form (EAGLE3_PROFILE_FILE), both for one typed `Window`.

Written by the recorder inside SGLang's processes (recorder/profiler.py, from
recorder/window.summarize), read by the one aggregator (profiling/aggregate.py) that
the report, `tune` (offline and live), `bench speculation` and the benchmarks use.
Only the standard library and common/: cheap to import in every scheduler rank.

    line = log_line(w)                 # the log line (no newline)
    text = json_line(w)                # the JSON line (newline included)
    w = record_from_line(line)         # either form -> a Window
    w = find_record(line)              # None when the line holds no record
    counts = Counts()
    for w in iter_records(path, counts): ...   # streamed; counts.skipped = bad lines

Log line format (stable; one line per window per profiled rank and (batch size,
draft steps); fields are space-separated key=value, lists are comma-separated
key:count, mean/p50/p90 triplets are slash-separated, times in ms):

  EAGLE3_PROFILE v=2 rank=0 cycles=40 bs=1:40 draft_tokens=16:40 steps=2:40
    cycle_ms=25.10/24.90/27.00 draft_ms=... verify_fwd_ms=... accept_ms=...
    draft_extend_ms=... other_ms=... host_ms=...
    share=draft:4.0,verify_fwd:86.0,accept:2.0,draft_extend:3.0,other:1.0,host:4.0
    accept_len=2.05 accept_hist=1:10,2:20,3:10 tok_s=81.70
    prefill=3/120.00 syncs=0 syncs_counted=device-syncs dropped=0 clock=cuda

(printed on one line). v=2: `cycle_ms` is wall time, from a cycle's start to the next
cycle's start (recorder/cycles.py), and `host` the gap between the worker's step
return and that next start. v=1 lines (older servers) have no host field: their
cycle is the step alone, and they read with host 0. The meaning of each field:
recorder/window.py. A record line may carry a log prefix ("[2026-12-01 10:00:00 TP0] ");
the JSON form is `Window.to_json()`, one object a line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.profiling.names import TAG
from sgl_eagle_ext.profiling.phases import PHASES

FORMAT_VERSION = 2
# The timed rows of a record with cycles: the wall cycle, the phases inside the step,
# `other` (the step minus the phases) and `host` (after the step, until the next).
ROWS = ("cycle", *PHASES, "other", "host")
SHARED = ROWS[1:]  # the rows that add up to the cycle (their shares sum to 100)
V1_ROWS = ROWS[:-1]  # v=1 lines: no host row
# The one place a log line is recognised as a record ("EAGLE3_PROFILE: ..."
# announcements are not records).
LINE_MARK = TAG + " v="
# Errors a bad line raises while parsed; the readers count it and go on.
BAD_LINE = (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError)


@dataclass
class Stats:
    """One row of a window: mean/p50/p90 ms over its cycles, share of summed cycle time (%)."""

    mean: float
    p50: float
    p90: float
    share: float = 0.0


@dataclass
class Window:
    """One profile window: the decode cycles of one (batch size, draft steps) on one rank."""

    rank: int
    cycles: int  # decode cycles timed
    bs: dict[int, int]  # batch size -> cycles
    draft_tokens: dict[int, int]
    clock: str  # "cuda" (events on the stream) or "host"
    steps: dict[int, int] = field(default_factory=dict)  # {}: the worker did not say
    phases: dict[str, Stats] = field(default_factory=dict)  # ROWS, when cycles > 0
    accept_hist: dict[int, int] = field(default_factory=dict)  # accepted tokens -> req-cycles
    accept_len: float | None = None
    tok_s: float | None = None
    prefill_n: int = 0
    prefill_ms: float = 0.0  # mean, start to next start
    syncs: int = 0
    sync_counted: str = "off"
    dropped: int = 0
    ts: float | None = None  # wall-clock time written (JSON form only)
    v: int = FORMAT_VERSION

    @staticmethod
    def _dominant(mix: dict[int, int]) -> int | None:
        return max(mix, key=mix.get) if mix else None

    @property
    def main_bs(self) -> int:
        """The batch size of most of its cycles (a window holds one since v=1's split)."""
        return self._dominant(self.bs)

    @property
    def main_steps(self) -> int | None:
        return self._dominant(self.steps)

    @property
    def main_draft_tokens(self) -> int | None:
        return self._dominant(self.draft_tokens)

    def to_json(self) -> dict:
        """The JSON-lines form (the log line's content, field for field)."""
        out: dict = {
            "v": self.v,
            "rank": self.rank,
            "clock": self.clock,
            "cycles": self.cycles,
            "bs": self.bs,
            "draft_tokens": self.draft_tokens,
            "steps": self.steps,
            "prefill": {"n": self.prefill_n, "ms_mean": self.prefill_ms},
            "syncs": self.syncs,
            "sync_counted": self.sync_counted,
            "dropped": self.dropped,
        }
        if self.cycles:
            out["phases"] = {p: vars(s).copy() for p, s in self.phases.items()}
            out["accept_len"] = self.accept_len
            out["accept_hist"] = self.accept_hist
            out["tok_s"] = self.tok_s
        if self.ts is not None:
            out["ts"] = self.ts
        return out


def _ints(mix) -> dict[int, int]:
    return {int(k): int(v) for k, v in (mix or {}).items()}


def from_json(obj: dict) -> Window:
    """A JSON record (string keys, as JSON writes them) -> a Window. KeyError/TypeError
    when it is not a whole record."""
    if not isinstance(obj, dict):
        raise ValueError("a JSON line that is not an object")
    w = Window(
        rank=int(obj["rank"]),
        cycles=int(obj["cycles"]),
        bs=_ints(obj["bs"]),
        draft_tokens=_ints(obj["draft_tokens"]),
        clock=str(obj.get("clock", "?")),
        steps=_ints(obj.get("steps")),
        prefill_n=int(obj.get("prefill", {}).get("n", 0)),
        prefill_ms=float(obj.get("prefill", {}).get("ms_mean", 0.0)),
        syncs=int(obj.get("syncs", 0)),
        sync_counted=str(obj.get("sync_counted", "off")),
        dropped=int(obj.get("dropped", 0)),
        ts=obj.get("ts"),
        v=int(obj["v"]),
    )
    if w.cycles:
        ph = obj["phases"]
        rows = ROWS if "host" in ph else V1_ROWS
        w.phases = {p: Stats(**{k: float(v) for k, v in ph[p].items()}) for p in rows}
        w.phases.setdefault("host", Stats(0.0, 0.0, 0.0, 0.0))
        w.accept_len = obj.get("accept_len")
        w.accept_hist = _ints(obj.get("accept_hist"))
        w.tok_s = obj.get("tok_s")
    return w


# -- writing -------------------------------------------------------------------
def _mix(counts: dict) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: int(kv[0])))


def _triplet(s: Stats) -> str:
    return f"{s.mean:.2f}/{s.p50:.2f}/{s.p90:.2f}"


def _rows(w: Window) -> tuple[str, ...]:
    return ROWS if w.v >= 2 else V1_ROWS  # a v=1 window read back writes as it was


def log_line(w: Window) -> str:
    """The window as its log line (no newline)."""
    parts = [
        TAG,
        f"v={w.v}",
        f"rank={w.rank}",
        f"cycles={w.cycles}",
        f"bs={_mix(w.bs)}",
        f"draft_tokens={_mix(w.draft_tokens)}",
    ]
    if w.steps:
        parts.append(f"steps={_mix(w.steps)}")
    if w.cycles:
        rows = _rows(w)
        parts += [f"{p}_ms={_triplet(w.phases[p])}" for p in rows]
        parts.append("share=" + ",".join(f"{p}:{w.phases[p].share:.1f}" for p in rows[1:]))
        acc = w.accept_len
        parts.append(f"accept_len={acc:.2f}" if acc is not None else "accept_len=na")
        parts.append(f"accept_hist={_mix(w.accept_hist)}")
        parts.append(f"tok_s={w.tok_s:.2f}" if w.tok_s is not None else "tok_s=na")
    parts.append(f"prefill={w.prefill_n}/{w.prefill_ms:.2f}")
    counted = w.sync_counted
    parts.append("syncs=off" if counted == "off" else f"syncs={w.syncs} syncs_counted={counted}")
    parts += [f"dropped={w.dropped}", f"clock={w.clock}"]
    return " ".join(parts)


def json_line(w: Window) -> str:
    """The window as one JSON line (newline included): one write per record, so
    appends from several ranks never interleave."""
    return json.dumps(w.to_json(), separators=(",", ":")) + "\n"


# -- reading -------------------------------------------------------------------
def _read_mix(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (p.split(":") for p in text.split(",") if p)}


def _read_triplet(text: str) -> Stats:
    mean, p50, p90 = (float(x) for x in text.split("/"))
    return Stats(mean, p50, p90)


def _na_or_float(text: str | None) -> float | None:
    return None if text in (None, "na") else float(text)


def _from_log_line(line: str) -> Window:
    at = line.find(LINE_MARK)
    if at < 0:
        raise ValueError(f"not a {TAG} record line")
    f = dict(tok.split("=", 1) for tok in line[at + len(TAG) :].split())
    n, ms = f["prefill"].split("/")
    w = Window(
        rank=int(f["rank"]),
        cycles=int(f["cycles"]),
        bs=_read_mix(f["bs"]),
        draft_tokens=_read_mix(f["draft_tokens"]),
        clock=f["clock"],
        steps=_read_mix(f.get("steps", "")),
        prefill_n=int(n),
        prefill_ms=float(ms),
        syncs=0 if f["syncs"] == "off" else int(f["syncs"]),
        sync_counted=f.get("syncs_counted", "off"),
        dropped=int(f["dropped"]),
        v=int(f["v"]),
    )
    if w.cycles:
        rows = ROWS if "host_ms" in f else V1_ROWS  # v=1: no host field
        w.phases = {p: _read_triplet(f[f"{p}_ms"]) for p in rows}
        w.phases.setdefault("host", Stats(0.0, 0.0, 0.0, 0.0))
        for item in f["share"].split(","):
            p, s = item.split(":")
            w.phases[p].share = float(s)
        w.accept_len = _na_or_float(f.get("accept_len"))
        w.accept_hist = _read_mix(f["accept_hist"])
        w.tok_s = _na_or_float(f.get("tok_s"))
    return w


def _is_json_record(line: str) -> bool:
    return line.startswith("{") and '"cycles"' in line


def record_from_line(line: str) -> Window:
    """A record line (log or JSON form) -> its Window, every number finite.
    ValueError (or KeyError, ...: BAD_LINE) when the line is not a whole record."""
    line = line.strip()
    w = from_json(nesting.json_loads(line)) if line.startswith("{") else _from_log_line(line)
    checked(w.to_json())
    if w.v not in READ_VERSIONS:  # v=0, v=3: not read as if it were this format
        raise ValueError(f"record format v={w.v}: this version reads v=1 and v={FORMAT_VERSION}")
    return w


def find_record(line: str) -> Window | None:
    """The record on this line, or None when the line holds none (other log output);
    raises BAD_LINE when it holds a truncated or garbled one."""
    line = line.strip()
    if _is_json_record(line) or LINE_MARK in line:
        return record_from_line(line)
    return None


# A record's integers are counts, ranks and sizes: never negative (a `cycles=-N` line
# would cancel a real window in a sum), never beyond what a float holds exactly (a
# 400-digit integer made math.isfinite raise OverflowError: a traceback, not a skip).
MAX_INT = 2**53
READ_VERSIONS = (1, FORMAT_VERSION)  # the formats this reader knows (v=1 and the current)


def checked(obj):
    """`obj` if every number in it is finite (integers: 0 <= n <= MAX_INT, dict keys
    too), else ValueError: one bad line is skipped, never summed into (and poisoning)
    what the readers add up."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
            stack.extend(k for k in v if isinstance(k, int))
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, bool):
            continue
        elif isinstance(v, int) and not 0 <= v <= MAX_INT:
            raise ValueError("an integer out of range")  # not printed: it may be 4000 digits
        elif isinstance(v, float) and not math.isfinite(v):
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
