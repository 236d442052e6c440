"""The probe backoff (in_sglang/adaptive_backoff.py) on SGLang 0.5.23's own adaptive
controller (AdaptiveStepSlot), fed the per-request accepted-draft counts a never-
and an always-accepted draft produce. Counts of batches, not timings."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.in_sglang import adaptive_backoff

pytestmark = pytest.mark.harness  # SGLang's adaptive_spec_params

CFG = {"candidate_steps": [0, 1, 2, 3, 5], "update_interval": 5, "warmup_batches": 10}


@pytest.fixture
def slot_class():
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveStepSlot

    adaptive_backoff.uninstall()
    yield AdaptiveStepSlot
    adaptive_backoff.uninstall()


def share_at_zero(slot_class, accepted: int, batches: int = 2000) -> tuple[float, int]:
    slot = slot_class(initial_steps=3, cfg=CFG)
    at_zero = 0
    for _ in range(batches):
        at_zero += slot.current_steps == 0
        # A draft accepts at most as many tokens as it proposed.
        slot.update([min(accepted, slot.current_steps)])
    return at_zero / batches, slot.current_steps


def test_sglang_alone_drafts_half_the_time_with_a_useless_draft(slot_class):
    share, _ = share_at_zero(slot_class, accepted=0)
    assert 0.4 < share < 0.6  # a probe at every decision spent at 0


def test_backoff_keeps_a_useless_draft_off(slot_class):
    assert adaptive_backoff.install(32, version="0.5.23")
    share, steps = share_at_zero(slot_class, accepted=0)
    assert share > 0.95 and steps == 0


def test_backoff_still_drafts_a_draft_that_pays(slot_class):
    assert adaptive_backoff.install(32, version="0.5.23")
    share, steps = share_at_zero(slot_class, accepted=5)
    assert share == 0 and steps == 5


def drafted(slot_class, accepted, batches: int) -> int:
    """Drafting batches of one bucket, in a process that knows nothing of the draft."""
    adaptive_backoff._evidence = adaptive_backoff._Evidence()
    slot = slot_class(initial_steps=3, cfg=CFG)
    n = 0
    for _ in range(batches):
        n += slot.current_steps > 0
        slot.update([min(accepted, slot.current_steps)] * 2)
    return n


def test_exploration_a_never_paying_draft_pays_is_bounded(slot_class):
    """A draft that is never accepted: SGLang warms each bucket up for warmup_batches +
    update_interval batches at its starting steps (15), then probes every other
    decision. Here a dry warm-up ends after update_interval (5) batches and the probes
    back off, the dry warm-up weighing as three failed probes: probes after 8, 16, 32
    decisions of 5 batches, each cut after PROBE_CUT (2) dry batches once the warm-up
    was dry: at most 5 + 2 per probe drafting batches (docs/chain-verify.md states the
    bound)."""
    stock = [drafted(slot_class, 0, n) for n in (15, 100, 500)]
    assert stock == [15, 55, 255]
    assert adaptive_backoff.install(32, version="0.5.23")
    bounded = [drafted(slot_class, 0, n) for n in (15, 100, 500, 2000)]
    assert bounded == [5, 7, 13, 31]  # 33%, 7%, 2.6%, 1.55% of the batches; 1.2% steady


def test_a_later_bucket_learns_from_an_earlier_dry_one(slot_class):
    """Bucket 1 runs 200 batches of a never-accepted draft; bucket 2 starts 50 batches
    later: its warm-up ends after one dry batch and its backoff starts where bucket 1's
    reached, its probes cut short as bucket 1's (SGLang alone: 105 and 80 drafting
    batches)."""
    assert adaptive_backoff.install(32, version="0.5.23")
    first, later = slot_class(initial_steps=3, cfg=CFG), slot_class(initial_steps=3, cfg=CFG)
    drafted_first = drafted_later = 0
    for i in range(200):
        drafted_first += first.current_steps > 0
        first.update([0])
        if i >= 50:
            drafted_later += later.current_steps > 0
            later.update([0, 0])
    assert (drafted_first, drafted_later) == (9, 3)


def test_a_bucket_met_after_a_dry_one_starts_at_zero_steps(slot_class, tmp_path):
    """Through SGLang's bucket router (AdaptiveSpeculativeParams, the shipped table's
    shape): bucket 1's warm-up is dry; bucket 4, met later, runs its first batch at 0
    steps (SGLang: at the starting 3) and then only its probes."""
    import json

    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    table = tmp_path / "table.json"
    table.write_text(json.dumps({str(b): {"candidate_steps": [0, 1, 3]} for b in (1, 4)}))

    def drafted_at_4(install: bool) -> list[int]:
        adaptive_backoff.uninstall()
        if install:
            assert adaptive_backoff.install(32, version="0.5.23")
        params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(table))
        for _ in range(20):  # bucket 1: a never-accepted draft
            steps = params.get_steps_for_batch(1)
            params.on_verify_complete([0], batch_size=1)
        steps = []
        for _ in range(150):
            steps.append(params.get_steps_for_batch(4))
            params.on_verify_complete([0] * 4, batch_size=4)
        return steps

    stock, bounded = drafted_at_4(False), drafted_at_4(True)
    assert stock[0] == 3 and bounded[0] == 0
    assert sum(s > 0 for s in stock) == 80
    assert sum(s > 0 for s in bounded) == 4  # its probes, 2 batches each


def test_a_pin_in_force_keeps_a_new_bucket_where_it_is(slot_class, tmp_path, monkeypatch):
    """Under a pin of the schedule controller (tune live measuring a cell) a new bucket
    is not moved to 0 steps: the pin holds every bucket's steps."""
    import json
    from types import SimpleNamespace

    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    from sgl_eagle_ext.in_sglang import schedule_control

    table = tmp_path / "table.json"
    table.write_text(json.dumps({str(b): {"candidate_steps": [0, 1, 3]} for b in (1, 4)}))
    assert adaptive_backoff.install(32, version="0.5.23")
    adaptive_backoff._evidence.dry = True
    pinned = SimpleNamespace(in_force=SimpleNamespace(pin=3))
    monkeypatch.setattr(schedule_control, "CONTROLLER", pinned)
    params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(table))
    assert params.get_steps_for_batch(4) == 3
    monkeypatch.setattr(schedule_control, "CONTROLLER", None)
    assert params.get_steps_for_batch(1) == 0  # no pin: the dry evidence applies


def test_a_probe_that_holds_clears_what_the_buckets_knew(slot_class):
    assert adaptive_backoff.install(32, version="0.5.23")
    dry = slot_class(initial_steps=3, cfg=CFG)
    for _ in range(5):
        dry.update([0])
    assert dry.current_steps == 0 and adaptive_backoff._evidence.dry
    while dry.current_steps == 0:  # the next probe, now with a draft that pays
        dry.update([0])
    for _ in range(10):
        dry.update([dry.current_steps])
    assert dry.current_steps > 1 and not adaptive_backoff._evidence.dry
    fresh = slot_class(initial_steps=3, cfg=CFG)
    for _ in range(4):  # four dry batches: a full interval is needed again
        fresh.update([0])
    assert fresh.current_steps == 3


def test_a_probe_of_a_draft_that_pays_is_not_cut(slot_class):
    """Once the draft was dry, a probe ends after PROBE_CUT dry batches; one that accepts
    within them runs its whole interval and holds (SGLang's decision)."""
    assert adaptive_backoff.install(32, version="0.5.23")
    slot = slot_class(initial_steps=3, cfg=CFG)
    for _ in range(5):
        slot.update([0])
    assert slot.current_steps == 0 and adaptive_backoff._evidence.dry
    while slot.current_steps == 0:
        slot.update([0])
    slot.update([0])  # one dry batch of the probe: not yet cut
    assert slot.current_steps == 1
    for _ in range(4):
        slot.update([1])
    assert slot.current_steps >= 1 and not adaptive_backoff._evidence.dry
    # and a dry probe is cut after two batches, the next decision a full interval later
    adaptive_backoff._evidence.dry = True
    dry = slot_class(initial_steps=1, cfg=CFG)
    adaptive_backoff._states[dry] = adaptive_backoff._SlotState(probing=True)
    dry._batch_count = dry.warmup_batches + 1
    dry.update([0])
    assert dry.current_steps == 1
    dry.update([0])
    assert dry.current_steps == 0
    assert (dry._batch_count - dry.warmup_batches) % dry.update_interval == 0


def test_a_draft_accepted_now_and_then_warms_up_as_sglang_does(slot_class):
    """A draft accepted in one batch of every four (three dry batches in a row, fewer
    than update_interval): the same steps, batch by batch, as SGLang's controller."""

    def trajectory() -> list[int]:
        slot = slot_class(initial_steps=3, cfg=CFG)
        steps = []
        for i in range(60):
            steps.append(slot.current_steps)
            slot.update([slot.current_steps if i % 4 == 0 else 0])
        return steps

    stock = trajectory()
    assert adaptive_backoff.install(32, version="0.5.23")
    assert trajectory() == stock and stock[:15] == [3] * 15


def test_a_draft_that_starts_to_pay_is_found_again(slot_class):
    assert adaptive_backoff.install(32, version="0.5.23")
    slot = slot_class(initial_steps=3, cfg=CFG)
    for _ in range(3000):  # useless: backed off to the limit
        slot.update([0])
    assert slot.current_steps == 0
    batches = 0
    while slot.current_steps < 3 and batches < 32 * 5 + 40:  # found within one period
        slot.update([slot.current_steps])
        batches += 1
    assert slot.current_steps >= 3


def test_install_is_idempotent_reversible_and_fails_closed(slot_class, caplog):
    original = vars(slot_class)["_recompute_params"]
    update = vars(slot_class)["update"]
    assert adaptive_backoff.install(8, version="0.5.23")
    wrapped = vars(slot_class)["_recompute_params"]
    assert wrapped is not original and wrapped.__wrapped__ is original
    assert vars(slot_class)["update"].__wrapped__ is update
    assert adaptive_backoff.install(8, version="0.5.23")  # twice: one wrapper
    assert vars(slot_class)["_recompute_params"] is wrapped
    adaptive_backoff.uninstall()
    assert vars(slot_class)["_recompute_params"] is original
    assert vars(slot_class)["update"] is update
    # No 0-step state before 0.5.16: one line, nothing patched.
    assert not adaptive_backoff.install(8, version="0.5.13.post1")
    assert vars(slot_class)["_recompute_params"] is original
    assert "EAGLE_EXT_ADAPTIVE_BACKOFF: disabled: SGLang 0.5.13.post1" in caplog.text
    assert not adaptive_backoff.install_from_env({"EAGLE_EXT_ADAPTIVE_BACKOFF": "lots"})


def test_the_anchor_is_in_every_release_with_zero_steps():
    for release in releases.RELEASES:
        spec = release.adaptive
        if spec is not None and spec.min_step == 0:
            assert spec.decide_anchor, release.version


def test_probe_failed_is_said_once_per_server_not_by_every_rank(slot_class, caplog, monkeypatch):
    """Defect 4: the line was logged at INFO by each TP rank; rank 0 says it, the others
    at DEBUG."""
    import logging

    assert adaptive_backoff.install(32, version="0.5.23")
    caplog.set_level(logging.INFO, logger=adaptive_backoff.PATCHES.logger.name)
    for rank, said in ((1, False), (0, True)):
        caplog.clear()
        monkeypatch.setattr(adaptive_backoff, "_rank", lambda rank=rank: rank)
        share_at_zero(slot_class, accepted=0, batches=200)
        assert ("probe at steps" in caplog.text) == said, rank
