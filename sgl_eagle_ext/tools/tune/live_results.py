"""tune --live's results file and schedule: what was measured, what is left, what fits.

The results file is JSON lines, one record per finished measurement, appended (and
flushed) the moment it ends, so an interrupted run keeps every finished cell:

    {"kind": "cell", "level": 2, "steps": 3, "setup": {...}, "client": {...},
     "profile": {...}, "rounds": 2, "wall_s": 41.2, "ts": ...}

kind: "cell" (a pinned step count on the live server), "validation" (the written table
under SGLang's controller; "table" holds its digest), "arm" (a separate fixed server:
"arm" names it, e.g. baseline or eagle3-2step). A rerun with the same file skips
what it holds for the same setup (models, preset, load); a file from another setup
is refused rather than mixed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools.bench import records

RESULTS_CAP = 256 * safe_files.MIB  # thousands of cells are a few MB
KINDS = ("cell", "validation", "arm")


def _int(v, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _num(v) -> bool:
    return v is None or (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    )


def problem(rec) -> str | None:
    """Why `rec` is not a record this tool wrote (the first wrong field), or None."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if rec.get("kind") not in KINDS:
        return "field 'kind' must be one of " + ", ".join(KINDS)
    if not _int(rec.get("level"), 1):
        return "field 'level' must be a whole number >= 1"
    checks = (
        ("steps", lambda v: v is None or _int(v), "a whole number >= 0"),
        ("arm", lambda v: v is None or isinstance(v, str), "a string"),
        ("table", lambda v: v is None or isinstance(v, str), "a string"),
        ("setup", lambda v: isinstance(v, dict), "an object"),
        ("rounds", lambda v: v is None or _int(v, 1), "a whole number >= 1"),
        ("wall_s", _num, "a finite number"),
        ("client", lambda v: v is None or isinstance(v, dict), "an object"),
        ("profile", lambda v: v is None or isinstance(v, dict), "an object"),
    )
    for name, ok, what in checks:
        if not ok(rec.get(name)):
            return f"field '{name}' must be {what}"
    if rec["kind"] == "cell" and rec.get("steps") is None:
        return "a cell without 'steps'"
    for part, fields in (
        ("client", ("output_tok_s", "duration_s", "server_cpu_s", "tok_per_server_cpu_s")),
        ("profile", ("accept_len", "cycle_ms", "decode_tok_s")),
    ):
        sub = rec.get(part) or {}
        for name in fields:
            if not _num(sub.get(name)):
                return f"field '{part}.{name}' must be a finite number"
    prof = rec.get("profile") or {}
    for name in ("cycles", "request_cycles"):
        if name in prof and not _int(prof[name]):
            return f"field 'profile.{name}' must be a whole number >= 0"
    for name in ("hist", "steps_mix", "ms_sum"):
        if not (prof.get(name) is None or isinstance(prof[name], dict)):
            return f"field 'profile.{name}' must be an object"
    return None


@dataclass(frozen=True)
class Key:
    kind: str
    level: int
    steps: int | None = None
    arm: str | None = None
    table: str | None = None

    def tag(self) -> str:
        what = {
            "cell": f"steps {self.steps}",
            "validation": "tuned table",
            "arm": f"{self.arm} server",
        }[self.kind]
        return f"c={self.level} {what}"


def key_of(rec: dict) -> Key:
    return Key(rec["kind"], rec["level"], rec.get("steps"), rec.get("arm"), rec.get("table"))


class Results:
    def __init__(self, path: Path, setup: dict):
        self.path = path
        self.setup = setup
        self.records: dict[Key, dict] = {}
        self.resumed = 0

    def load(self) -> Results:
        """Read what an earlier run measured (same setup only). Every record is type
        checked before it is used (problem()): a hand-edited or foreign line is one
        clear error naming it, never a traceback in the report an hour later."""
        if not (self.path.exists() or self.path.is_symlink()):
            return self
        try:
            text = safe_files.read_text("--results", self.path, cap=RESULTS_CAP)
        except UserError as e:
            raise UserError(e.message, fix="pass another --results file") from None
        lines = text.splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = nesting.json_loads(line)
            except (ValueError, RecursionError):
                rec = None
            why = problem(rec) if rec is not None else "not JSON"
            if why:
                if n == len(lines):
                    continue  # a line cut by a crash mid-write: measured again
                raise UserError(
                    f"{self.path}: line {n} is not a tune --live record ({why}).",
                    fix="pass another --results file (or remove that line)",
                )
            key = key_of(rec)
            if rec.get("setup") != self.setup:
                diff = sorted(
                    k
                    for k in set(self.setup) | set(rec.get("setup") or {})
                    if (rec.get("setup") or {}).get(k) != self.setup.get(k)
                )
                raise UserError(
                    f"{self.path}: line {n} was measured under another setup "
                    f"(differs in {', '.join(diff) or 'setup'}); results are not mixed.",
                    fix="pass another --results file, or rerun with the same settings",
                )
            self.records[key] = rec
        self.resumed = len(self.records)
        return self

    def has(self, key: Key) -> bool:
        return key in self.records

    def append(self, rec: dict) -> None:
        """One whole line, or none (a full disk cuts the file back: records.py)."""
        rec = {**rec, "setup": self.setup}
        line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
        records.append_bytes(self.path, line.encode("utf-8", "surrogateescape"))
        self.records[key_of(rec)] = rec

    def of_kind(self, kind: str) -> list[dict]:
        return [r for k, r in self.records.items() if k.kind == kind]


def steps_priority(steps: list[int]) -> list[int]:
    """0 first (the baseline every gain needs), then the ends and middles of the rest:
    cut from the end, a budget still spans the range."""
    rest = sorted(s for s in steps if s != 0)
    order = [0] if 0 in steps else []
    spans = [rest]
    while spans:
        nxt = []
        for span in spans:
            if not span:
                continue
            if len(span) <= 2:
                order += [s for s in span if s not in order]
                continue
            first, last, mid = span[0], span[-1], span[len(span) // 2]
            order += [s for s in (first, last, mid) if s not in order]
            nxt += [span[1 : len(span) // 2], span[len(span) // 2 + 1 : -1]]
        spans = nxt
    return order


def schedule(levels: list[int], steps: list[int]) -> list[Key]:
    """Every cell, most needed first: each step count over every level, steps in
    steps_priority order."""
    return [Key("cell", lv, s) for s in steps_priority(steps) for lv in sorted(levels)]


def fit(pending: list[Key], per_key_s: float, left_s: float, reserve: int) -> list[Key]:
    """The longest prefix of `pending` that fits `left_s`, keeping time for `reserve`
    more measurements (the validation pass) at `per_key_s` each."""
    n = int(left_s // per_key_s) - reserve if per_key_s > 0 else len(pending)
    return pending[: max(0, n)]
