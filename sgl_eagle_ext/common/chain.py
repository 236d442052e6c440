"""The chain rule, written once: a chain (topk 1) of `steps` draft steps verifies
steps + 1 tokens (its drafts and the bonus token), which is what SGLang's
--speculative-num-draft-tokens must say for it (SGLang asserts it: topk=1 requires
speculative_num_draft_tokens == speculative_num_steps + 1)."""

from __future__ import annotations


def draft_tokens(steps: int) -> int:
    """--speculative-num-draft-tokens of a chain of `steps` steps."""
    return steps + 1


def steps_of(draft_tokens: int) -> int:
    """The steps of a chain that verifies `draft_tokens` tokens."""
    return draft_tokens - 1
