"""The draft caught up when drafting resumes, instead of a draft-extend every 0-step cycle.

At 0 steps (adaptive's no-drafting band) SGLang's v2 worker still runs the draft's
draft-extend after every one-token verify: it keeps the draft's KV and next input current
so that drafting can resume at full acceptance, at the price of one draft forward per
cycle (on the CPU harness 10-12% of a 0-step cycle; docs/chain-verify.md). SGLang can skip
it (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND), but then leaves zeroed stubs and stale
draft KV: after an up-switch the draft runs cold.

Here the skip is SGLang's own, and what it drops is kept instead: per request, the
EAGLE-3 hidden states the one-token verify captured (the target's aux layers, one row
per position) and the token it produced (the draft's input at that position). When the
request drafts again, one extend of the draft over all kept positions (SGLang's own
prefill draft-extend, `_draft_extend_for_prefill`, over a batch of the requests that
kept any) writes the draft's KV for every position decoded while off and gives its
next input, exactly what the per-cycle draft-extends would have left; its rows replace
the stubs before the draft step runs. A request that keeps EAGLE_EXT_DRAFT_CATCHUP
positions (64 by default) is caught up there and then, so memory stays bounded: per
request at most N rows of (aux layers x hidden) activations, for Kimi-K2.5 3 x 7168 bf16
= 43 KB a position, 2.75 MB at 64; nothing for a request that never sits at 0 steps.

Where it does not apply it stays off with one log line and SGLang's per-cycle
draft-extend runs: the overlap scheduler (the sequence lengths of a batch reach the CPU
a cycle late there: the positions kept could not be named without a GPU sync), mixed
chunked prefill (a decode inside a prefill batch would leave kept positions behind),
rejection sampling (the draft's probabilities would have to be carried too), a release
without the skip (the release table's `draft_catchup`). A request whose kept positions
do not join up with its length (retracted and re-run, say) drops them, with one line:
its draft then runs from stale KV, as SGLang's skip would. Nothing here synchronizes
the GPU: positions come from the CPU lengths SGLang keeps without overlap, and every
tensor operation is an asynchronous copy or index.

Installed in every scheduler process (its FEATURE in in_sglang_base/registry.py)
through the patching base: version gated, idempotent, reversible, fail closed.
"""

from __future__ import annotations

import copy
import logging
import os
import weakref
from dataclasses import dataclass, field

from sgl_eagle_ext.common.contract import DRAFT_CATCHUP_DEFAULT, DRAFT_CATCHUP_ENV
from sgl_eagle_ext.common.contract import parse_draft_catchup as parse
from sgl_eagle_ext.in_sglang_base import patching, registry

PATCHES = patching.Patches(DRAFT_CATCHUP_ENV, logger="sgl_eagle_ext.draft_catchup")


@dataclass
class _Kept:
    """One request's positions decoded at 0 steps that the draft has not run over yet."""

    start: int  # the first position
    hidden: list = field(default_factory=list)  # per position: the target's aux rows [1, D]
    tokens: list = field(default_factory=list)  # per position: the token it produced [1]

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Req -> _Kept
_state: dict = {"keep": DRAFT_CATCHUP_DEFAULT, "said": set()}


def _say_once(key: str, msg: str) -> None:
    if key not in _state["said"]:
        _state["said"].add(key)
        PATCHES.say(logging.WARNING, f"{DRAFT_CATCHUP_ENV}: {msg}")


def _dropped(req, kept: _Kept, length: int) -> None:
    _say_once(
        "gap",
        f"request {req.rid}: kept positions end at {kept.end}, length {length}; dropped "
        "(its draft resumes from stale KV)",
    )


def _keep(worker, batch, output) -> None:
    """After SGLang's stubs: keep what the skipped draft-extend would have read."""
    if batch.forward_mode.is_idle() or not batch.reqs:
        return
    hidden = getattr(output.logits_output, "hidden_states", None)
    lens = batch.seq_lens_cpu
    if hidden is None or lens is None:
        for req in batch.reqs:
            _kept.pop(req, None)
        _say_once("inputs", "a 0-step verify without hidden states or CPU lengths: not kept")
        return
    # clones: the verify's outputs may live in a CUDA graph's buffers, rewritten next cycle
    hidden = hidden.clone()
    tokens = output.next_token_ids.clone()
    full = []
    # the verified tokens' positions (their lengths before the verify), read once
    for i, (req, pos) in enumerate(zip(batch.reqs, lens.tolist())):
        kept = _kept.get(req)
        if kept is None or kept.end != pos:
            if kept is not None:
                _dropped(req, kept, pos)
            kept = _kept[req] = _Kept(pos)
        kept.hidden.append(hidden[i : i + 1])
        kept.tokens.append(tokens[i : i + 1])
        if len(kept.tokens) >= _state["keep"]:
            full.append(i)
    if full:  # bounded memory: these catch up now, into the stubs the next cycle reads
        _catch_up(worker.draft_worker, batch, output.next_draft_input, full, lens_after=1)


def _catch_up(draft_worker, batch, draft_input, rows: list[int], lens_after: int = 0) -> None:
    """One draft extend over every kept position of batch.reqs[rows]; its topk and
    hidden rows replace theirs in draft_input. `lens_after`: what the batch's CPU lengths
    are past the kept positions (1 right after a verify, 0 before a draft)."""
    import torch

    lens = [int(n) for n in batch.seq_lens_cpu]  # once per catch-up, not per request
    todo, kept = [], []
    for i in rows:
        req = batch.reqs[i]
        k = _kept.pop(req, None)
        if k is None:
            continue
        if k.end != lens[i] + lens_after:
            _dropped(req, k, lens[i] + lens_after)
            continue
        todo.append(i)
        kept.append(k)
    if not todo:
        return
    index = _to_device(todo, torch.int64, batch.seq_lens.device)
    sub = _narrowed(batch, todo, index, kept)
    next_tokens = torch.cat([k.tokens[-1] for k in kept])
    hidden = torch.cat([h for k in kept for h in k.hidden])
    got = draft_worker._draft_extend_for_prefill(sub, hidden, next_tokens)
    counts = sub.extend_lens
    for name in ("topk_p", "topk_index", "hidden_states"):
        mine, theirs = getattr(draft_input, name), getattr(got, name)
        if mine is None or theirs is None:
            continue
        merged = mine.clone()  # never write into a tensor another batch may share
        merged[index] = theirs.to(merged.dtype)
        setattr(draft_input, name, merged)
    why = "as drafting resumes" if not lens_after else f"at {_state['keep']} kept"
    if why not in _state["said"]:  # once each: the log shows the path ran
        _state["said"].add(why)
        PATCHES.say(
            logging.INFO,
            f"{DRAFT_CATCHUP_ENV}: first catch-up {why}: {len(todo)} request(s), "
            f"{sum(counts)} position(s) in one draft extend",
        )


def _narrowed(batch, todo: list[int], index, kept: list[_Kept]):
    """A copy of `batch` narrowed to the requests `todo` (on the device: `index`), as a
    prefill-style extend over their kept positions (the batch itself is not touched)."""
    import torch

    device = batch.seq_lens.device
    sub = copy.copy(batch)
    sub.reqs = [batch.reqs[i] for i in todo]
    sub.forward_mode = _state["extend_mode"]
    counts = [len(k.tokens) for k in kept]
    ends = [k.end for k in kept]
    # the draft's input at position p is the token p produced; SGLang's prefill extend
    # shifts its input_ids left by one and appends next_token_ids, so hand it each
    # request's tokens shifted right by one (the first one is shifted out again)
    sub.input_ids = torch.cat([t for k in kept for t in (k.tokens[-1], *k.tokens[:-1])])
    sub.req_pool_indices = batch.req_pool_indices[index]
    # the slots the target wrote those positions to (the draft's KV shares its indices),
    # gathered on the device: row x stride + position, for every kept position
    pool = batch.req_to_token_pool.req_to_token
    pool_rows = torch.repeat_interleave(
        sub.req_pool_indices.to(torch.int64),
        _to_device(counts, torch.int64, device),
        output_size=sum(counts),
    )
    cols = _to_device([p for k in kept for p in range(k.start, k.end)], torch.int64, device)
    slots = pool.reshape(-1)[pool_rows * pool.shape[1] + cols]
    sub.out_cache_loc = slots.to(
        batch.out_cache_loc.dtype if batch.out_cache_loc is not None else torch.int64
    )
    sub.seq_lens = _to_device(ends, batch.seq_lens.dtype, device)
    sub.seq_lens_cpu = torch.tensor(ends, dtype=batch.seq_lens_cpu.dtype)
    sub.orig_seq_lens = sub.seq_lens
    sub.seq_lens_sum = sum(ends)
    sub.prefix_lens = [k.start for k in kept]
    sub.extend_lens = counts
    sub.extend_num_tokens = sum(counts)
    sub.extend_logprob_start_lens = list(counts)
    sub.return_logprob = False
    sub.top_logprobs_nums = sub.token_ids_logprobs = None
    sub.multimodal_inputs = None
    sub.decoding_reqs = None
    sub.has_grammar = False
    sub.chunked_req = None
    sub.chunked_req_next_prompt_token = None
    sub.spec_info = None
    if batch.sampling_info is not None:  # ForwardBatch.init_new writes its grammars
        sub.sampling_info = copy.copy(batch.sampling_info)
    return sub


def _to_device(values: list[int], dtype, device):
    """A host list on the device without a stream sync (a pageable copy would sync)."""
    import torch

    t = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def _fail(e: BaseException) -> None:
    """Fail closed at run time: one line (no traceback: a bug here must not take the rank
    down), SGLang's per-cycle draft-extend from the next 0-step cycle on; requests that
    had kept positions resume from stale draft KV (their output stays the target's)."""
    _restore_skip()
    _kept.clear()
    _state["failed"] = True
    PATCHES.say(
        logging.WARNING,
        f"{DRAFT_CATCHUP_ENV}: off from now on ({type(e).__name__}: {e}); 0-step cycles run "
        "SGLang's per-cycle draft-extend",
    )


def _on_stub(wrapped, worker, args, kwargs):
    result = wrapped(*args, **kwargs)
    if not _state.get("failed"):
        batch = kwargs.get("batch", args[0] if args else None)
        output = kwargs.get("batch_output", args[1] if len(args) > 1 else None)
        try:
            _keep(worker, batch, output)
        except Exception as e:  # fail closed, never the rank
            _fail(e)
    return result


def _before_draft(wrapped, draft_worker, args, kwargs):
    batch = kwargs.get("batch", args[0] if args else None)
    if _kept and batch is not None and not batch.forward_mode.is_idle():
        try:
            rows = [i for i, req in enumerate(batch.reqs) if req in _kept]
            if rows:
                _catch_up(draft_worker, batch, batch.spec_info, rows)
        except Exception as e:  # fail closed, never the rank
            _fail(e)
    return wrapped(*args, **kwargs)


def _on_prefill_extend(wrapped, draft_worker, args, kwargs):
    # a prefill (a new request, or a retracted one run again) rebuilds its draft KV
    batch = kwargs.get("batch", args[0] if args else None)
    for req in getattr(batch, "reqs", None) or ():
        _kept.pop(req, None)
    return wrapped(*args, **kwargs)


def install(keep: int, server_args=None, version: str | None = None) -> bool:
    if PATCHES.installed:
        return True
    found = PATCHES.part(
        "draft_catchup",
        "has no 0-step draft-extend skip: the per-cycle draft-extend stays",
        version,
    )
    if found is None:
        return False
    release, dc = found
    why = _unsupported(server_args)
    if why:
        return PATCHES.refuse(f"{why}: the per-cycle draft-extend stays")
    plan = PATCHES.resolve(
        [
            patching.Wrap(dc.stub, _on_stub, label="0-step stubs"),
            patching.Wrap(dc.draft, _before_draft, label="draft step"),
            # in a prefill of a request that kept positions (retracted, run again)
            patching.Wrap(dc.extend, _on_prefill_extend, label="prefill draft-extend"),
        ],
        release=release.version,
    )
    if plan is None:
        return False
    try:
        owner, name, _ = patching.resolve(dc.mode)
        _state["extend_mode"] = getattr(owner, name)
    except LookupError as e:
        return PATCHES.refuse(f"anchor {dc.mode} not found: {e}")
    _state.update(keep=keep, skip_env=dc.skip_env, skip_was=os.environ.get(dc.skip_env))
    if not PATCHES.install(
        plan,
        on=f"on (0-step cycles skip the draft-extend; the draft catches up over up to "
        f"{keep} kept positions per request when drafting resumes)",
    ):
        return False
    os.environ[dc.skip_env] = "1"  # SGLang's own skip, read at every 0-step cycle
    return True


def _unsupported(server_args) -> str | None:
    if server_args is None:
        return "the server's arguments are not at hand"
    if not getattr(server_args, "disable_overlap_schedule", False):
        return "the overlap scheduler runs (lengths reach the CPU a cycle late)"
    if getattr(server_args, "enable_mixed_chunk", False):
        return "--enable-mixed-chunk"
    if getattr(server_args, "speculative_use_rejection_sampling", False):
        return "rejection sampling"
    if (getattr(server_args, "speculative_eagle_topk", 1) or 1) != 1:
        return "a tree (topk > 1) never runs at 0 steps"
    return None


def _restore_skip() -> None:
    var = _state.pop("skip_env", None)
    if var:
        was = _state.pop("skip_was", None)
        if was is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = was


def uninstall() -> None:
    PATCHES.uninstall()
    _restore_skip()
    _kept.clear()
    _state["said"].clear()
    _state["failed"] = False


def install_from_env(env, server_args=None) -> bool:
    try:
        keep = parse(env.get(DRAFT_CATCHUP_ENV, ""))
    except ValueError as e:
        return PATCHES.refuse(f"{DRAFT_CATCHUP_ENV}={env.get(DRAFT_CATCHUP_ENV)!r}: {e}")
    return False if keep is None else install(keep, server_args)


FEATURE = registry.register(
    registry.Feature(
        DRAFT_CATCHUP_ENV,
        enabled=lambda env: bool(env.get(DRAFT_CATCHUP_ENV, "").strip()),
        hooks={registry.SCHEDULER: lambda ctx: install_from_env(ctx.env, ctx.server_args)},
        order=registry.CONTROL,
    )
)
