"""SGLang's own adaptive-speculation log lines: when the server switched, and why.

SGLang (0.5.13.post1+, speculative/eagle_worker_v2.py and adaptive_spec_params.py)
logs on rank 0:

  Adaptive spec params updated: steps 3 -> 0 (ema_accept_len=0.21)
      a bucket's EMA of accepted drafts crossed a threshold (the decision);
  Switch adaptive runtime state: steps 3 -> 0, draft_tokens 4 -> 1
      the worker swapped its runtime state: after such a decision, or because the
      batch size moved into a bucket whose current steps differ;
  speculative_adaptive disabled: <reason>. Falling back to static speculative params.
      adaptive was turned off at startup (static speculation served).

A switch right after a decision with the same steps is that decision: "probe" when
it leaves 0 steps (after each interval at 0, SGLang tries the smallest positive
candidate, whatever the EMA), else "accept length". Any other switch is a batch-size
move ("batch size").
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass, field

DECISION = re.compile(
    r"Adaptive spec params updated: steps (?P<a>\d+) -> (?P<b>\d+) "
    r"\(ema_accept_len=(?P<ema>-?[\d.]+)\)"
)
SWITCH = re.compile(
    r"Switch adaptive runtime state: steps (?P<a>\d+) -> (?P<b>\d+), "
    r"draft_tokens (?P<ta>\d+) -> (?P<tb>\d+)"
)
DISABLED = re.compile(r"speculative_adaptive disabled: (?P<why>.*?)\. Falling back")
# SGLang's log prefix: "[2026-12-01 10:20:00] " or "[2026-12-01 10:20:00 TP0] "
STAMP = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


@dataclass
class Switch:
    line: int  # 1-based line number in its file
    time: str | None
    old: int
    new: int
    reason: str  # "accept length", "probe" or "batch size"
    ema_accept_len: float | None = None  # accepted drafts per request (EMA), for decisions

    def describe(self) -> str:
        why = {
            "accept length": f"accept-length EMA {self.ema_accept_len or 0:.2f} accepted "
            "drafts/request",
            "probe": "SGLang probes drafting again after an interval at 0 steps",
        }.get(self.reason, "the batch size moved to a bucket with other steps")
        at = self.time or f"line {self.line}"
        return f"{at}: steps {self.old} -> {self.new} ({why})"


@dataclass
class AdaptiveLog:
    switches: list[Switch]  # all, or (read with `keep`) the first and last `keep`
    disabled: list[str]  # SGLang's reasons for turning adaptive off
    total: int = 0  # switches seen, kept or not
    by_reason: Counter = field(default_factory=Counter)

    def absorb(self, other: AdaptiveLog) -> None:
        self.switches += other.switches
        self.disabled += [d for d in other.disabled if d not in self.disabled]
        self.total += other.total
        self.by_reason.update(other.by_reason)

    def to_json(self) -> dict:
        return {
            "switches": [vars(s) for s in self.switches],
            "switch_count": self.total,
            "switches_by_reason": dict(self.by_reason),
            "disabled": self.disabled,
        }


def read(lines, keep: int | None = None) -> AdaptiveLog:
    """`keep`: hold only the first and the last `keep` switches (counts stay whole):
    a log of millions of switches in bounded memory."""
    first: list[Switch] = []
    last: deque[Switch] = deque(maxlen=keep)
    disabled: list[str] = []
    by_reason: Counter = Counter()

    def add(s: Switch) -> None:
        by_reason[s.reason] += 1
        (first if keep is None or len(first) < keep else last).append(s)

    decision = None  # the last decision not yet followed by its switch
    for n, line in enumerate(lines, 1):
        if "adaptive" not in line.lower():
            continue
        stamp = STAMP.match(line)
        ts = stamp["ts"] if stamp else None
        if m := DECISION.search(line):
            decision = (int(m["a"]), int(m["b"]), float(m["ema"]))
        elif m := SWITCH.search(line):
            old, new = int(m["a"]), int(m["b"])
            if decision is not None and decision[:2] == (old, new):
                reason = "probe" if old == 0 else "accept length"
                add(Switch(n, ts, old, new, reason, decision[2]))
            else:
                add(Switch(n, ts, old, new, "batch size"))
            decision = None
        elif (m := DISABLED.search(line)) and m["why"] not in disabled and len(disabled) < 100:
            disabled.append(m["why"])
    return AdaptiveLog(first + list(last), disabled, sum(by_reason.values()), by_reason)
