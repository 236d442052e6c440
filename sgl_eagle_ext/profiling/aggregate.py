"""The one aggregator of profile windows: read once, merged once, figured once.

Used by the report, `tune` (offline: one Profile per log; live: one per measurement),
`bench speculation`, the demo and the benchmarks, so a log gives every tool the same
figures (tests/test_aggregate.py feeds one log to all of them).

    prof = Profile.read(path)          # EAGLE3_PROFILE windows (log or JSON lines),
                                       # SGLang's Decode batch lines, its server_args
    prof.add(window)                   # or windows one by one (tune --live)
    cells = prof.cells()               # (batch size, draft steps) -> Cell, warm-up left out
    cell = prof.cell(bs=1)             # every step count at batch size 1, merged
    cell.mean("cycle"), cell.accept_len, cell.tok_s, cell.hist

Rules, stated once:
- Key: a window's batch size and draft steps are those of most of its cycles (the
  recorder writes one of each per window). A window that does not say its steps (older
  servers) takes the server's: a chain's are its draft tokens - 1; a tree's come from
  server_args (`Cell.steps_known` says whether the windows said them).
- Warm-up: per key, the leading windows whose mean cycle exceeds WARMUP_FACTOR x the
  median window of the rest are warm-up (JIT compilation, autotuning, first
  allocations): left out of the cells and counted (`Profile.warmup`).
- Merge: a cell's mean/p50/p90 are the cycle-weighted means of its windows'.
- Accept length, tok/s, ms per token: common/figures.py, from the histogram.
- Histogram: one convention, SGLang's (`spec_correct_drafts_histogram`): correct
  drafts per request-cycle (the record's accept_hist, accepted tokens with the bonus
  token, is converted here and nowhere else).
- SGLang's "Decode batch" lines: per batch size, their gen throughput and accept
  length. A line's rate is its tokens over the wall time since the previous line; a
  batch size's figure is its lines' summed tokens over their summed time (what the
  profile's tok/s is for cycles), the lines kept as the cycles are: a line after a
  "Prefill batch" line is left out (SGLang's decode clock ran through the prefill and
  the idle before it; SGLang logs every prefill batch, so every idle gap ends in one),
  then the warm-up rule above, on each line's time (time per line, not per token,
  which follows acceptance). A slow line later on counts, as its cycle does in the
  profile. The baseline's time per token is that figure of the baseline's lines.
"""

from __future__ import annotations

import ast
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import chain, figures
from sgl_eagle_ext.profiling.record import (
    BAD_LINE,
    ROWS,
    SHARED,
    Window,
    checked,
    find_record,
    read_lines,
)

WARMUP_FACTOR = 2.0
DECODE_BATCH = re.compile(
    r"Decode batch.*?#running-req: (?P<bs>\d+),.*?"
    r"(?:accept len: (?P<acc>[\d.]+),.*?)?gen throughput \(token/s\): (?P<tps>[\d.]+)"
)
SERVER_ARGS = re.compile(r"server_args=(?:ServerArgs\()?(?P<body>\{.*\})")
SPEC_KEYS = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_adaptive",
    "speculative_draft_model_path",
)


@dataclass
class Cell:
    """Decode cycles of one (batch size, draft steps), merged from their windows."""

    bs: int = 0
    cycles: int = 0
    windows: int = 0
    mixed: int = 0  # windows whose batch sizes varied (grouped by the dominant one)
    steps_known: bool = False  # the windows said their steps (not inferred)
    sums: dict = field(default_factory=lambda: defaultdict(float))  # (row, stat) -> sum(x*n)
    hist: Counter = field(default_factory=Counter)  # correct drafts -> request-cycles
    clocks: set = field(default_factory=set)  # the windows' clocks ("cuda", "host")

    def add(self, w: Window) -> None:
        n = w.cycles
        self.clocks.add(w.clock)
        self.cycles += n
        self.windows += 1
        self.mixed += len(w.bs) > 1
        self.steps_known |= bool(w.steps)
        for p in ROWS:
            s = w.phases[p]
            self.sums[p, "mean"] += s.mean * n
            self.sums[p, "p50"] += s.p50 * n
            self.sums[p, "p90"] += s.p90 * n
        for tokens, k in w.accept_hist.items():
            self.hist[figures.correct_drafts(tokens)] += k

    def absorb(self, other: Cell) -> None:
        """Merge another cell of the same key (another log of the same setting)."""
        self.bs = self.bs or other.bs
        self.cycles += other.cycles
        self.windows += other.windows
        self.mixed += other.mixed
        self.steps_known |= other.steps_known
        self.clocks |= other.clocks
        for k, v in other.sums.items():
            self.sums[k] += v
        self.hist.update(other.hist)

    def mean(self, row: str, stat: str = "mean") -> float:
        return self.sums[row, stat] / self.cycles if self.cycles else 0.0

    def share(self, row: str) -> float:
        cycle = self.mean("cycle")
        return 100 * self.mean(row) / cycle if cycle and row in SHARED else 0.0

    @property
    def accept_len(self) -> float | None:
        return figures.from_histogram(self.hist)

    @property
    def tok_s(self) -> float | None:
        """Decode tokens/s over all streams: accept length x batch size / wall cycle."""
        return figures.cycle_tok_s(self.accept_len, self.bs, self.mean("cycle"))


@dataclass
class SGLangLines:
    """SGLang's own Decode batch lines at one batch size. A line's rate is its
    tokens over the wall time since the previous line (scheduler metrics_reporter:
    num_generated_tokens / gap_latency), so its tokens are accept len x batch size
    (x the log interval: the same for every line) and its time tokens / rate."""

    bs: int = 1
    tps: list[float] = field(default_factory=list)
    accept: list[float | None] = field(default_factory=list)  # None: no speculation
    # the line came after a Prefill batch line: SGLang's decode clock runs from the last
    # Decode batch line (scheduler_metrics_mixin), so its time holds that prefill too
    after_prefill: list[bool] = field(default_factory=list)

    def add(self, tps: float, acc: float | None, after_prefill: bool = False) -> None:
        self.tps.append(tps)
        self.accept.append(acc)
        self.after_prefill.append(after_prefill)

    def absorb(self, other: SGLangLines) -> None:
        self.tps += other.tps
        self.accept += other.accept
        self.after_prefill += other.after_prefill

    def kept(self) -> list[tuple[float, float]]:
        """(tokens, seconds) of the lines kept as the profile keeps cycles (module doc):
        not a line after a prefill, not the leading warm-up lines."""
        lines = [
            ((a or 1.0) * self.bs, t)
            for t, a, p in zip(self.tps, self.accept, self.after_prefill)
            if t > 0 and not p
        ]
        lines = [(tok, tok / t) for tok, t in lines]
        return lines[leading_warmup([s for _, s in lines]) :]

    @property
    def gen_tps(self) -> float | None:
        """Tokens / seconds over the kept lines (the rate of their summed time)."""
        kept = self.kept()
        return sum(t for t, _ in kept) / sum(s for _, s in kept) if kept else None

    @property
    def accept_len(self) -> float | None:
        acc = [a for a in self.accept if a is not None]
        return sum(acc) / len(acc) if acc else None


def spec_from(line: str) -> dict:
    """SPEC_KEYS of SGLang's `server_args=` log line ({} if it is not one)."""
    m = SERVER_ARGS.search(line)
    if not m:
        return {}
    try:
        args = ast.literal_eval(m["body"])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return {}  # not SGLang's dict (a list key is unhashable, a set has no keys)
    if not isinstance(args, dict):
        return {}
    return {k: args.get(k) for k in SPEC_KEYS if k in args}


def key_of(w: Window, spec: dict | None = None) -> tuple[int, int] | None:
    """(batch size, draft steps) of a window with decode cycles (module doc), or None."""
    if not w.cycles or w.phases["cycle"].mean <= 0:
        return None  # nothing measured (a cycle_ms=0 window)
    steps = w.main_steps
    if steps is None:
        spec = spec or {}
        steps = spec.get("speculative_num_steps")
        if spec.get("speculative_eagle_topk") in (1, None) or steps is None:
            steps = chain.steps_of(w.main_draft_tokens or 1)
    return w.main_bs, steps


def leading_warmup(times: list[float]) -> int:
    """How many leading entries are warm-up: each over WARMUP_FACTOR x the median of
    those after it (module doc). Windows' mean cycles and SGLang's lines' times alike."""
    lead = 0
    while lead < len(times) - 1:
        if times[lead] <= WARMUP_FACTOR * statistics.median(times[lead + 1 :]):
            break
        lead += 1
    return lead


def warmup_windows(windows: list[Window]) -> int:
    """How many leading windows the warm-up rule leaves out (module doc)."""
    return leading_warmup([w.phases["cycle"].mean for w in windows])


@dataclass(eq=False)
class Profile:
    """Everything read from one server's log(s)."""

    path: Path | None = None
    spec: dict = field(default_factory=dict)  # SPEC_KEYS from server_args
    windows: int = 0  # profile records read (with or without decode cycles)
    skipped: int = 0  # record or Decode batch lines that were truncated or garbled
    decode_lines: int = 0
    prefill: list = field(default_factory=list)  # (n, mean ms) per window
    sglang: dict = field(default_factory=dict)  # bs -> SGLangLines
    by_key: dict = field(default_factory=lambda: defaultdict(list))  # key -> windows in order
    _prefill_seen: bool = False  # a Prefill batch line since the last Decode batch line

    @property
    def setting(self) -> tuple[int, int, int] | None:
        """(steps, topk, draft tokens) of the server, from its server_args."""
        keys = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
        if all(isinstance(self.spec.get(k), int) for k in keys):
            return tuple(self.spec[k] for k in keys)
        return None

    # -- in --------------------------------------------------------------------------
    def add(self, w: Window) -> tuple[int, int] | None:
        """One window; its key, or None for a window without decode cycles. A window
        of cycles that took 0 ms measured nothing: counted as skipped."""
        if w.cycles and w.phases["cycle"].mean <= 0:
            self.skipped += 1
            return None
        self.windows += 1
        if w.prefill_n:
            self.prefill.append((w.prefill_n, w.prefill_ms))
        key = key_of(w, self.spec)
        if key is not None:
            self.by_key[key].append(w)
        return key

    def add_line(self, line: str) -> None:
        """One log line: a record, SGLang's Decode batch line or its server_args."""
        try:
            w = find_record(line)
            if w is not None:
                self.add(w)
            elif "Decode batch" in line:
                after_prefill, self._prefill_seen = self._prefill_seen, False
                m = DECODE_BATCH.search(line)
                if not m:
                    raise ValueError("garbled Decode batch line")
                tps = checked(float(m["tps"]))
                acc = checked(float(m["acc"])) if m["acc"] else None
                self.lines_at(int(m["bs"])).add(tps, acc, after_prefill)
                self.decode_lines += 1
            elif "Prefill batch" in line:
                self._prefill_seen = True
            elif not self.spec and "server_args=" in line:
                self.spec = spec_from(line)
        except BAD_LINE:
            self.skipped += 1

    @classmethod
    def read(cls, source: Path | str | Iterable[str]) -> Profile:
        """A log or JSON-lines file (streamed: logs run to gigabytes) or lines."""
        if isinstance(source, (str, Path)):
            # one pass: SGLang logs server_args at startup, before any window
            prof, lines = cls(Path(source)), read_lines(Path(source))
        else:
            prof, lines = cls(), source
        for line in lines:
            prof.add_line(line)
        return prof

    @classmethod
    def read_all(cls, paths: Iterable[Path]) -> Profile:
        """Several logs as one (the report's view: they are read as one server's)."""
        out = cls()
        for path in paths:
            out.absorb(cls.read(path))
        return out

    def absorb(self, other: Profile) -> None:
        self.spec = self.spec or other.spec
        self.windows += other.windows
        self.skipped += other.skipped
        self.decode_lines += other.decode_lines
        self.prefill += other.prefill
        for bs, lines in other.sglang.items():
            self.lines_at(bs).absorb(lines)
        for key, windows in other.by_key.items():
            self.by_key[key] += windows

    def lines_at(self, bs: int) -> SGLangLines:
        return self.sglang.setdefault(bs, SGLangLines(bs))

    # -- out -------------------------------------------------------------------------
    def warmup(self, key) -> tuple[int, int]:
        """(windows, cycles) the warm-up rule left out at `key`."""
        windows = self.by_key.get(key, [])
        lead = warmup_windows(windows)
        return lead, sum(w.cycles for w in windows[:lead])

    def cells(self) -> dict[tuple[int, int], Cell]:
        """(batch size, draft steps) -> Cell, warm-up windows left out."""
        out = {}
        for key, windows in self.by_key.items():
            cell = Cell(bs=key[0])
            for w in windows[warmup_windows(windows) :]:
                cell.add(w)
            out[key] = cell
        return out

    def cell(self, bs: int, steps: int | None = None) -> Cell:
        """The cells at batch size `bs` merged (only `steps` when given)."""
        out = Cell(bs=bs)
        for (b, s), c in self.cells().items():
            if b == bs and (steps is None or s == steps):
                out.absorb(c)
        return out

    def batch_sizes(self) -> list[int]:
        return sorted({bs for bs, _ in self.by_key} | set(self.sglang))


def merge_cells(profiles: Iterable[Profile]) -> dict[tuple[int, int], Cell]:
    """Cells of several servers' logs, merged per key (tune: one setting's logs pool)."""
    out: dict = {}
    for prof in profiles:
        for key, cell in prof.cells().items():
            out.setdefault(key, Cell(bs=key[0])).absorb(cell)
    return out


def baseline_ms(profiles: Iterable[Profile]) -> dict[int, float]:
    """Per-stream baseline ms per token at each batch size, from baseline servers'
    Decode batch lines (SGLangLines.gen_tps over all of them)."""
    merged = Profile()
    for prof in profiles:
        merged.absorb(prof)
    out = {}
    for bs, lines in merged.sglang.items():
        tps = lines.gen_tps
        if tps:
            out[bs] = figures.ms_per_token(tps, bs)
    return out
