"""The project's figures, each computed once, here: every tool (report, tune, bench and
its views, the demo, the CPU model builder, the recorder inside SGLang) calls these
functions, and tests/test_figures.py fails on a second formula anywhere else.

Accept length, SGLang's definition: tokens a request gains per verify cycle, the bonus
token (the target's own next token) included, so a cycle that accepts no draft still
counts 1 (tokenizer_manager: completion_tokens / spec_verify_ct).

    per_cycle(correct_drafts)             # tokens one request gains in one cycle
    correct_drafts(tokens)                # ... and back
    tokens_of_cycles(correct_drafts, cycles)   # tokens gained in many cycles
    from_counts(tokens, verify_cycles)    # accept length over a request or many
    of_request(reported, tokens, verify_cycles)
    of_meta(meta_info)                    # a /generate reply's meta_info
    from_histogram({correct drafts: cycles})
    decode_only(tokens, verify_cycles, requests)  # the server-wide figure

Acceptance per draft position: position_counts(hist, steps) and position_rates(hist).

Speed: tok_s(tokens, ms); cycle_tok_s(accept_len, bs, cycle_ms) (decode tokens/s over
all streams); ms_per_token(tok_s, bs) (per stream); break_even(cycle_ms, base_ms) (the
accept length tau* at which speculation equals the baseline); gain(accept_len,
cycle_ms, base_ms) (speculative over baseline tokens/s); crossover(levels, ratios)
(the level from which speculation stops paying).

None wherever a figure does not exist (no verify cycle: a server without speculation,
or a request that ended in its prefill; no cycle time; no baseline).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

BONUS = 1  # the verify step's own token, in every cycle


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def per_cycle(correct_drafts: int) -> int:
    """Tokens one request gains in one verify cycle."""
    return int(correct_drafts) + BONUS


def correct_drafts(tokens: int) -> int:
    """The inverse of per_cycle: correct drafts of a cycle that gave `tokens`."""
    return max(0, int(tokens) - BONUS)


def from_counts(tokens, verify_cycles) -> float | None:
    """Tokens / verify cycles; None without a verify cycle or without tokens."""
    if not (_number(tokens) and _number(verify_cycles)) or verify_cycles <= 0 or tokens <= 0:
        return None
    return tokens / verify_cycles


def of_request(reported=None, tokens=None, verify_cycles=None) -> float | None:
    """One request's accept length: SGLang's own figure where it reported one (a
    positive number: its OpenAI details write 0.0 for "none"), else from its counts."""
    if _number(reported) and reported > 0:
        return float(reported)
    return from_counts(tokens, verify_cycles)


def of_meta(meta: Mapping) -> float | None:
    """From SGLang's `meta_info` (or `sglext.spec_tokens_details` plus the usage's
    completion tokens)."""
    return of_request(
        meta.get("spec_accept_length"), meta.get("completion_tokens"), meta.get("spec_verify_ct")
    )


def from_histogram(correct_drafts: Mapping[int, int]) -> float | None:
    """Mean accept length of verify cycles counted by their correct drafts."""
    cycles = sum(correct_drafts.values())
    if not cycles:
        return None
    return sum(per_cycle(k) * n for k, n in correct_drafts.items()) / cycles


def decode_only(tokens, verify_cycles, requests) -> float | None:
    """SGLang's server-wide figure (/server_info `avg_spec_accept_length`, the one
    sglang.bench_serving prints): tokens gained in verify cycles / cycles. Each
    request's first token comes from its prefill, not a cycle, so `requests` of the
    `tokens` are left out (the per-request meta_info figure above keeps them)."""
    if not (_number(tokens) and _number(requests)):
        return None
    return from_counts(tokens - requests, verify_cycles)


def tokens_of_cycles(correct_drafts, cycles) -> int:
    """Tokens gained in `cycles` verify cycles that accepted `correct_drafts` drafts in
    all (each cycle adds its bonus token)."""
    return int(correct_drafts) + BONUS * int(cycles)


# ---------------------------------------------------------------- per draft position
def position_counts(hist: Mapping[int, int], steps: int | None = None) -> list[tuple[int, int]]:
    """(reached, accepted) request-cycles for draft positions j = 1..K from a histogram
    {correct drafts: cycles}: draft j was checked in a cycle that accepted drafts
    1..j-1 (and the chain had j steps or more), accepted where it had j correct or
    more. K: `steps`, else the deepest accepted position. Pool several settings by
    summing their counts position by position."""
    top = steps if steps is not None else max(hist, default=0)
    out = []
    for j in range(1, top + 1):
        reached = sum(n for k, n in hist.items() if k >= j - 1)
        accepted = sum(n for k, n in hist.items() if k >= j)
        out.append((reached, accepted))
    return out


@dataclass(frozen=True)
class PositionRate:
    """Draft position `position` (1-based): `rate`, the cumulative acceptance (share of
    all cycles that accepted draft j, vLLM's per-position figure), and `conditional`
    (EAGLE's alpha_j: share of the cycles that reached draft j which accepted it)."""

    position: int
    accepted_cycles: int
    rate: float
    conditional: float | None


def position_rates(hist: Mapping[int, int]) -> list[PositionRate]:
    total = sum(hist.values())
    if not total:
        return []
    return [
        PositionRate(j, accepted, accepted / total, accepted / reached if reached else None)
        for j, (reached, accepted) in enumerate(position_counts(hist), start=1)
    ]


def conditional_acceptance(counts: list[tuple[int, int]]) -> list[float]:
    """alpha_j from pooled (reached, accepted) counts, positions never reached left out."""
    return [accepted / reached for reached, accepted in counts if reached]


def cumulative_acceptance(alphas: list[float]) -> list[float]:
    """Cumulative acceptance per position (share of all cycles that accepted draft j)
    from the conditional alpha_j: alpha_1 ... alpha_j."""
    out, survive = [], 1.0
    for a in alphas:
        survive *= a
        out.append(survive)
    return out


def chain_accept_length(alphas: list[float], steps: int) -> float:
    """Expected accept length of a chain of `steps` drafts with conditional acceptance
    alpha_j: 1 + sum_j alpha_1 ... alpha_j (positions past the measured ones reuse the
    last alpha)."""
    total, survive = float(BONUS), 1.0
    for j in range(steps):
        a = alphas[j] if j < len(alphas) else (alphas[-1] if alphas else 0.0)
        survive *= a
        total += survive
    return total


# ---------------------------------------------------------------- speed
def tok_s(tokens, ms) -> float | None:
    """Tokens per second of `tokens` gained in `ms` milliseconds; None without time."""
    if not (_number(tokens) and _number(ms)) or ms <= 0:
        return None
    return 1000 * tokens / ms


def cycle_tok_s(accept_len, bs, cycle_ms) -> float | None:
    """Decode tokens/s over all streams of cycles of `cycle_ms` (wall, host included)
    that each give every one of `bs` requests `accept_len` tokens."""
    if not (_number(accept_len) and _number(bs)) or accept_len <= 0:
        return None
    return tok_s(accept_len * bs, cycle_ms)


def ms_per_token(tok_s_all, bs=1) -> float | None:
    """Per-stream milliseconds per token at batch size `bs` from the tokens/s of all
    its streams (a baseline's time per token); the inverse of tok_s for one stream."""
    if not (_number(tok_s_all) and _number(bs)) or tok_s_all <= 0:
        return None
    return 1000 * bs / tok_s_all


def break_even(cycle_ms, base_ms_per_token) -> float | None:
    """tau*: the accept length at which a speculative cycle of `cycle_ms` gives each
    stream what the baseline gives in the same time (cycle / baseline ms per token)."""
    if not (_number(cycle_ms) and _number(base_ms_per_token)) or base_ms_per_token <= 0:
        return None
    return cycle_ms / base_ms_per_token


def gain(accept_len, cycle_ms, base_ms_per_token) -> float | None:
    """Speculative over baseline tokens/s per stream: accept length / tau*."""
    tau = break_even(cycle_ms, base_ms_per_token)
    if not _number(accept_len) or not tau:
        return None
    return accept_len / tau


def pct_apart(a, b) -> float | None:
    """How far `a` is from `b`, in percent of `b` (a profile's tok/s against SGLang's
    own or a benchmark's)."""
    if not (_number(a) and _number(b)) or b == 0:
        return None
    return 100 * (a / b - 1)


# ---------------------------------------------------------------- crossover
@dataclass(frozen=True)
class Crossover:
    """Where speculation stops paying over rising load levels. `verdict`: always | never
    | until | mixed | no data; `level`: the crossover (lowest level from which it loses
    at every higher one); `estimate`: the crossing of 1 interpolated in log(level);
    `last_paying`: the highest level below it that pays; `losing_levels`: losses below
    the crossover (a mixed verdict). Records hold `asdict` of it; `read` takes one back."""

    verdict: str
    level: float | None = None
    estimate: float | None = None
    last_paying: float | None = None
    losing_levels: tuple = ()

    @classmethod
    def read(cls, record: Mapping | None) -> Crossover:
        """From a record's dict (anything malformed: no data)."""
        known = {f.name for f in fields(cls)}
        got = {k: v for k, v in (record or {}).items() if k in known}
        try:
            return cls(**{"verdict": "no data", **got})
        except TypeError:
            return cls("no data")


def crossover(levels: list, ratios: list | None = None, pays: list | None = None) -> Crossover:
    """The Crossover of rising load levels. A level pays where its ratio (speculative /
    baseline) is >= 1, or where `pays` says so (a verdict decided elsewhere, e.g. against
    a noise margin; None: no verdict); `estimate` from ratios only."""
    if pays is None:
        pays = [None if r is None else r >= 1.0 for r in ratios or []]
    if ratios is None:
        ratios = [None] * len(pays)
    rows = [(c, r, p) for c, r, p in zip(levels, ratios, pays) if p is not None]
    pts, wins = [(c, r) for c, r, _ in rows], [bool(p) for _, _, p in rows]
    if not pts:
        return Crossover("no data")
    if all(wins):
        return Crossover("always", last_paying=pts[-1][0])
    if not any(wins):
        return Crossover("never", level=pts[0][0])
    k = len(pts)
    while k > 0 and not wins[k - 1]:
        k -= 1
    # pts[k:] all lose; pts[k-1] wins
    if k == len(pts):  # pays at the highest level but lost somewhere below
        losing = [c for (c, _), w in zip(pts, wins) if not w]
        return Crossover("mixed", last_paying=pts[-1][0], losing_levels=tuple(losing))
    (c0, r0), (c1, r1) = pts[k - 1], pts[k]
    est = None
    if r0 is not None and r1 is not None and r0 != r1 and c0 > 0 and c1 > 0 and math.isfinite(r0):
        t = (r0 - 1.0) / (r0 - r1)
        est = math.exp(math.log(c0) + t * (math.log(c1) - math.log(c0)))
    earlier_losses = [c for (c, _), w in zip(pts[:k], wins[:k]) if not w]
    return Crossover("mixed" if earlier_losses else "until", c1, est, c0, tuple(earlier_losses))
