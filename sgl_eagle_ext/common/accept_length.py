"""SGLang's accept length, defined once: tokens a request gains per verify cycle,
the bonus token (the target's own next token) included, so a cycle that accepts no
draft still counts 1 (tokenizer_manager: completion_tokens / spec_verify_ct).

    accept_length.per_cycle(correct_drafts)          # one request, one cycle
    accept_length.correct_drafts(tokens)             # ... and back
    accept_length.from_counts(tokens, verify_cycles)  # over a request or many
    accept_length.of_request(reported, tokens, verify_cycles)
    accept_length.of_meta(meta_info)                  # a /generate reply's meta_info
    accept_length.from_histogram({correct drafts: cycles})
    accept_length.decode_only(tokens, verify_cycles, requests)  # the server-wide figure

Used by the recorder (inside SGLang), the launcher's checks, the bench records and
views. None wherever the figure does not exist (no verify cycle: a server without
speculation, or a request that ended in its prefill).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

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
