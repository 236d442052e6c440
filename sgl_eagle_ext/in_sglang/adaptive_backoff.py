"""Exponential backoff for SGLang's adaptive-speculation probes (0.5.16+).

SGLang's per-bucket controller (AdaptiveStepSlot) decides every `update_interval`
batches. At 0 steps (no drafting) every decision is a probe: it moves to the
smallest positive step, and with a draft that is never accepted the next decision
drops back to 0. Half the batches then draft for nothing: measured on the CPU
harness, a 1-step cycle cost 1.8x a 0-step one, so adaptive served ~0.7x the
baseline with a useless draft. Here a probe that fails doubles the number of
decisions spent at 0 before the next one (up to EAGLE_EXT_ADAPTIVE_BACKOFF); a
probe that holds resets it. A draft that starts to pay is still found, later.

Each bucket also warms up at the starting step count for warmup_batches +
update_interval batches (15 with the shipped table) before its first decision. A
warm-up in which no request accepts a draft token for update_interval batches in a row
ends there, as a failed probe; once one bucket's warm-up was dry (and no probe has held
since), a bucket met later starts at 0 steps with no warm-up, its backoff starting
where the others' reached, and a probe in which nothing is accepted for PROBE_CUT (2) batches ends
there too. A dry warm-up weighs as WARMUP_PROBES (3) failed probes. The bound with a draft
that is never accepted (the shipped table: interval 5, limit 32): the first bucket 5
batches at the starting steps, every later one none, then 2 per probe after 8, 16, 32,
32, ... decisions at 0: for one bucket 7 of the first 100 batches, 13 of 500, 31 of
2000, 1.2% in the steady state (SGLang alone: 55, 255, 1005; half). A draft accepted at
all warms up, and probes, as SGLang's does.

Installed in each scheduler process (its FEATURE in the in-process registry,
in_sglang_base/registry.py) when EAGLE_EXT_ADAPTIVE_BACKOFF is set (the eagle3-adaptive preset sets it). A wrapt wrapper on the release
table's anchor, through the patching base (patching.py): idempotent, reversible,
fail closed with one log line. The decision runs on the host every few batches;
nothing here touches the GPU.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

from sgl_eagle_ext.common.contract import ADAPTIVE_BACKOFF_ENV
from sgl_eagle_ext.in_sglang_base import patching, registry

PATCHES = patching.Patches(ADAPTIVE_BACKOFF_ENV, logger="sgl_eagle_ext.adaptive_backoff")


@dataclass
class _SlotState:
    backoff: int = 1  # decisions per stay at 0 (1 = SGLang's own: probe at each)
    skips_left: int = 0  # decisions still to skip before the next probe
    probing: bool = False  # the slot left 0 at its last decision
    dry: int = 0  # warm-up batches in a row in which no request accepted a draft token
    probe_dry: int = 0  # batches of the probe in progress, none of which accepted anything


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# dry batches that end a probe while the draft is known to be dry: at one request per
# batch a draft accepted 70% of the time is cut wrongly 9% of the time (0.3^2), and found
# again at a later probe
PROBE_CUT = 2
# a dry warm-up weighs as this many failed probes (the backoff doubles per failed probe):
# its update_interval (5) batches at the starting steps are the strongest evidence a
# server has at start (a draft accepted 20% of the time passes one 2 times in 3)
WARMUP_PROBES = 3


@dataclass
class _Evidence:
    """What every bucket of this process knows of the draft: whether it has been dry
    (a warm-up that accepted nothing) with no probe holding since, and the backoff it
    reached. Acceptance is the draft's on this workload, whatever the batch size: a
    bucket met after that starts at 0 steps (_route), and one already warming up ends
    its warm-up after one dry batch, not update_interval."""

    dry: bool = False
    backoff: int = 1


_evidence = _Evidence()


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # no usable torch.distributed: a single rank
        return 0


def _decide(limit: int):
    def wrapper(wrapped, slot, args, kwargs):
        state = _states.setdefault(slot, _SlotState())
        before = slot.current_steps
        if before == 0 and state.skips_left > 0:
            state.skips_left -= 1
            return False  # stay at 0: no probe this decision
        changed = wrapped(*args, **kwargs)
        after = slot.current_steps
        if before == 0:
            state.probing = after > 0
        elif after == 0:  # dropped to 0: a failed probe backs off, anything else resets
            state.backoff = min(state.backoff * 2, limit) if state.probing else 1
            state.skips_left = state.backoff - 1
            if state.probing:
                _evidence.backoff = max(_evidence.backoff, state.backoff)
            state.probing = False
            if state.backoff > 1:  # every TP rank decides alike: rank 0 tells at INFO
                PATCHES.say(
                    logging.INFO if _rank() == 0 else logging.DEBUG,
                    f"{ADAPTIVE_BACKOFF_ENV}: probe at steps {before} failed; "
                    f"next probe after {state.backoff} decisions at steps 0",
                )
        else:
            state.probing, state.backoff = False, 1  # the probe held: drafting pays
            _evidence.dry, _evidence.backoff = False, 1
        return changed

    return wrapper


def _warmup(wrapped, slot, args, kwargs):
    """Around the slot's per-batch update: a warm-up in which no request accepted a
    draft token for `update_interval` batches in a row ends there. The EMA takes what
    the warm-up saw (0 accepted) and the warm-up counts as a failed probe, so the slot
    drops to 0 steps and backs off. A draft that accepts anything warms up as SGLang's."""
    state = _states.setdefault(slot, _SlotState())
    counts = args[0] if args else kwargs.get("num_correct_drafts_per_req")
    warming = slot._batch_count < slot.warmup_batches and slot.current_steps > 0
    probing = state.probing and not warming and slot.current_steps > 0
    changed = wrapped(*args, **kwargs)
    if probing and counts and slot.current_steps > 0:
        return _probe_batch(slot, state, counts) or changed
    state.probe_dry = 0
    if not (warming and counts):
        state.dry = 0
        return changed
    state.dry = 0 if any(counts) else state.dry + 1
    # another bucket's warm-up was dry already (and no probe held since): one dry batch
    # is enough here
    enough = 1 if _evidence.dry else slot.update_interval
    if state.dry < enough:
        return changed
    steps, batches = slot.current_steps, state.dry
    state.dry = 0
    slot._batch_count = slot.warmup_batches  # regular decisions from here on
    slot.ema_accept_len = 0.0
    state.probing = True  # failed probes: the backoff doubles from what is known
    state.backoff = max(state.backoff, 2 ** (WARMUP_PROBES - 1), _evidence.backoff // 2)
    _evidence.dry = True
    PATCHES.say(
        logging.INFO if _rank() == 0 else logging.DEBUG,
        f"{ADAPTIVE_BACKOFF_ENV}: nothing accepted in {batches} warm-up batch(es) at "
        f"steps {steps}: deciding now",
    )
    return slot._recompute_params() or changed


def _probe_batch(slot, state: _SlotState, counts) -> bool:
    """One batch of a probe (the slot left 0 steps at its last decision). While the
    draft is known to be dry (_Evidence), a probe in which nothing is accepted for
    PROBE_CUT batches fails there, not at the end of its update_interval: the decision is
    taken now (the EMA set to what the probe saw), and the next one a full interval
    later. A draft that accepts anything in those batches probes as SGLang's does."""
    state.probe_dry = 0 if any(counts) else state.probe_dry + 1
    if not _evidence.dry or state.probe_dry < PROBE_CUT:
        return False
    state.probe_dry = 0
    slot.ema_accept_len = 0.0
    since = (slot._batch_count - slot.warmup_batches) % slot.update_interval
    slot._batch_count -= since  # the next regular decision: update_interval batches on
    return bool(slot._recompute_params())


def _pinned() -> bool:
    """A pin of the schedule controller (tune live) is in force: it holds every bucket's
    steps itself, and a measured cell must not run a batch at other steps."""
    from sgl_eagle_ext.in_sglang import schedule_control

    ctl = schedule_control.CONTROLLER
    return ctl is not None and ctl.in_force is not None and ctl.in_force.pin is not None


def _route(wrapped, params, args, kwargs):
    """Around the bucket router, before every batch: a bucket met for the first time
    once the draft is known to be dry (_Evidence) starts at 0 steps, as if its warm-up
    had been dry, its backoff where the others reached; it probes from there. SGLang
    would warm it up at the starting steps first (one batch here before: a drafting
    batch at a batch size not run yet)."""
    slot = wrapped(*args, **kwargs)
    if _evidence.dry and slot not in _states and 0 in slot.candidate_steps and not _pinned():
        state = _states.setdefault(slot, _SlotState())
        if slot._batch_count == 0 and slot.current_steps > 0:
            steps = slot.current_steps
            slot.current_steps = 0
            slot._batch_count = slot.warmup_batches  # regular decisions from here on
            slot.ema_accept_len = 0.0
            state.backoff = max(1, _evidence.backoff)
            state.skips_left = state.backoff - 1
            PATCHES.say(
                logging.INFO if _rank() == 0 else logging.DEBUG,
                f"{ADAPTIVE_BACKOFF_ENV}: a new batch-size bucket starts at steps 0 (not "
                f"{steps}): the draft was dry; next probe after {state.backoff} decisions",
            )
    return slot


def install(limit: int, version: str | None = None) -> bool:
    """Wrap the controller's decision; True when installed (now or before)."""
    if PATCHES.installed:
        return True
    release = PATCHES.release(version)
    if release is None:  # an unknown release: serve as SGLang would
        return False
    anchor = release.adaptive.decide_anchor if release.adaptive else None
    if anchor is None:
        return PATCHES.refuse(f"SGLang {release.version} has no 0-step adaptive state to back off")
    plan = [patching.Wrap(anchor, _decide(limit), label="the adaptive step decision")]
    if release.adaptive.warmup_anchor:
        plan.append(patching.Wrap(release.adaptive.warmup_anchor, _warmup, label="the warm-up"))
    if release.adaptive.route_anchor:
        plan.append(patching.Wrap(release.adaptive.route_anchor, _route, label="the bucket router"))
    return PATCHES.install(
        plan,
        release=release.version,
        on=f"on (up to {limit} decisions at steps 0)",
    )


def uninstall() -> None:
    global _evidence
    PATCHES.uninstall()
    _evidence = _Evidence()


def install_from_env(env) -> bool:
    text = env.get(ADAPTIVE_BACKOFF_ENV, "").strip()
    if not text or text == "0":
        return False
    if not text.isdigit():
        PATCHES.say(logging.WARNING, f"{ADAPTIVE_BACKOFF_ENV}={text!r} is not a whole number: off")
        return False
    return install(int(text))


FEATURE = registry.register(
    registry.Feature(
        ADAPTIVE_BACKOFF_ENV,
        enabled=lambda env: bool(env.get(ADAPTIVE_BACKOFF_ENV)),
        hooks={registry.SCHEDULER: lambda ctx: install_from_env(ctx.env)},
        order=registry.CONTROL,
    )
)
