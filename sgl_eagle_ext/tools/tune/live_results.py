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
import os
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import nesting
from sgl_eagle_ext.common.errors import UserError


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
        """Read what an earlier run measured (same setup only)."""
        if not self.path.exists():
            return self
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(
                f"{self.path}: cannot be read ({e}).", fix="pass another --results file"
            ) from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = nesting.json_loads(line)
                key = key_of(rec)
            except (ValueError, KeyError, TypeError):
                if n == len(text.splitlines()):
                    continue  # a line cut by a crash mid-write: measured again
                raise UserError(
                    f"{self.path}: line {n} is not a tune --live record.",
                    fix="pass another --results file (or remove that line)",
                ) from None
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
        rec = {**rec, "setup": self.setup}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())
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
