"""The schedule controller of tune --live (in_sglang/schedule_control.py) on SGLang's own
AdaptiveSpeculativeParams (the installed 0.5.23): pin, table swap, launch table back,
refusals, fail closed, uninstall. One rank, requests written while the scheduler is idle
(as the tuner does): each applies at the next verify. Ranks switching together:
tests/test_schedule_switching.py."""

from __future__ import annotations

import json
import logging

import pytest
import wrapt

from sgl_eagle_ext.common import releases, schedule_file
from sgl_eagle_ext.in_sglang import schedule_control as sc
from sgl_eagle_ext.in_sglang_base import patching

# SGLang's own controller: the harness (fails with one line without it, never skips)
pytestmark = pytest.mark.harness


@pytest.fixture(scope="module")
def asp():
    import importlib

    return importlib.import_module("sglang.srt.speculative.adaptive_spec_params")


R = releases.BY_VERSION["0.5.23"]
LAUNCH = {str(b): {"candidate_steps": [0, 1, 2, 3, 5]} for b in (1, 2, 4)}


@pytest.fixture
def params(tmp_path, asp):
    cfg = tmp_path / "live.json"
    cfg.write_text(json.dumps(LAUNCH | {"warmup_batches": 0, "update_interval": 1}))
    yield asp.AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(cfg))


@pytest.fixture
def control(tmp_path, caplog):
    # SGLang's servers log at INFO; the patching base says lines through logging once set up
    caplog.set_level(logging.INFO, logger="sgl_eagle_ext.schedule_control")
    path = tmp_path / "schedule.json"
    assert sc.install(str(path), R.version)
    seq = iter(range(1, 1000))

    def write(**fields):
        schedule_file.write_request(path, next(seq), **fields)  # as the tuner does
        if sc.CONTROLLER is not None:  # the scheduler idles between rounds: rank 0 grants
            sc.CONTROLLER.on_idle()

    yield write
    sc.uninstall()


def said(capsys, caplog) -> str:
    """What the controller printed (stderr before logging is set up, else the log)."""
    return capsys.readouterr().err + caplog.text


def steps(params) -> dict[int, int]:
    return {bs: slot.current_steps for bs, slot in params._slots.items()}


def test_anchor_is_in_the_release_table_and_in_sglang(asp):
    owner, name, original = patching.resolve(R.adaptive.control_anchor)
    assert owner is asp.AdaptiveSpeculativeParams and name == "on_verify_complete"
    assert original is vars(asp.AdaptiveSpeculativeParams)["on_verify_complete"]


def test_pin_holds_against_the_ema(params, control):
    control(pin=2)
    assert params.on_verify_complete([0], 1) == 2  # the routed bucket switches now
    assert steps(params) == {1: 2, 2: 2, 4: 2}
    for _ in range(40):  # every draft accepted: SGLang alone would climb to 5
        assert params.on_verify_complete([2], 1) is None
        assert params.on_verify_complete([2, 2, 2, 2], 4) is None
    assert steps(params) == {1: 2, 2: 2, 4: 2}
    control(pin=0)
    assert params.on_verify_complete([2], 4) == 0
    assert params.get_steps_for_batch(1) == 0


def test_without_pin_sglang_decides(params, control):
    control()  # no pin, no table: the launch table under SGLang's own controller
    for _ in range(10):
        params.on_verify_complete([4], 1)
    assert params.get_steps_for_batch(1) == 5  # SGLang climbed on full acceptance


def test_table_runs_under_sglangs_controller(params, control, tmp_path):
    table = tmp_path / "tuned.json"
    table.write_text(
        json.dumps({"1": {"candidate_steps": [1, 2, 3]}, "4": {"candidate_steps": [0]}})
    )
    control(pin=5)
    params.on_verify_complete([0], 1)
    control(table=str(table), initial_steps=2)
    params.on_verify_complete([0], 1)
    assert sorted(params._slots) == [1, 4]  # SGLang's loader built the buckets
    assert params.get_steps_for_batch(1) == 2 and params.get_steps_for_batch(2) == 2
    assert params.get_steps_for_batch(4) == 0
    for _ in range(30):  # SGLang's own warm-up (10) and interval (5), then its EMA
        params.on_verify_complete([3], 1)
    assert params.get_steps_for_batch(1) == 3
    control(pin=1)  # a pinned round in between ...
    params.on_verify_complete([0], 1)
    assert params.get_steps_for_batch(1) == 1 and sorted(params._slots) == [1, 2, 4]
    control(table=str(table), initial_steps=2)  # ... and SGLang's controller goes on
    assert params.on_verify_complete([3], 1) is None
    assert params.get_steps_for_batch(1) == 3
    control()  # back to the launch table
    params.on_verify_complete([0], 1)
    assert sorted(params._slots) == [1, 2, 4]


def test_table_with_steps_not_prebuilt_is_refused(params, control, tmp_path, capsys, caplog):
    table = tmp_path / "tuned.json"
    table.write_text(json.dumps({"1": {"candidate_steps": [0, 7]}}))
    control(table=str(table), initial_steps=7)
    params.on_verify_complete([0], 1)
    assert sorted(params._slots) == [1, 2, 4]
    assert "lists steps [7] that this server did not prebuild" in said(capsys, caplog)


def test_bad_file_keeps_the_last_control(params, control, tmp_path, capsys, caplog):
    control(pin=1)
    params.on_verify_complete([0], 1)
    (tmp_path / "schedule.json").write_text("{not json")
    for _ in range(5):
        params.on_verify_complete([3], 1)
    assert params.get_steps_for_batch(1) == 1
    assert said(capsys, caplog).count("keeping the last") == 1  # once per change of the file


def test_fail_closed_and_uninstall(params, tmp_path, capsys, caplog, asp):
    assert not sc.install(str(tmp_path / "s.json"), "0.5.10.post1")
    assert "EAGLE_EXT_SCHEDULE_FILE: disabled" in said(capsys, caplog)
    original = vars(asp.AdaptiveSpeculativeParams)["on_verify_complete"]
    _, _, idle_original = patching.resolve(R.workers[0].idle)
    assert sc.install(str(tmp_path / "s.json"), R.version)
    assert sc.install(str(tmp_path / "s.json"), R.version)  # idempotent
    assert vars(asp.AdaptiveSpeculativeParams)["on_verify_complete"] is not original
    from sglang.srt.managers.scheduler import Scheduler

    assert vars(Scheduler)["on_idle"] is not idle_original  # rank 0 grants while idle
    sc.uninstall()
    assert vars(asp.AdaptiveSpeculativeParams)["on_verify_complete"] is original
    assert vars(Scheduler)["on_idle"] is idle_original


@pytest.mark.parametrize(
    "data",
    [[], {"seq": "1"}, {"seq": 1, "pin": -1}, {"seq": 1, "pin": 1, "table": "x"}],
)
def test_parse_refuses(data):
    with pytest.raises(ValueError):
        sc.parse(data)


def test_a_router_without_the_parts_it_uses_is_left_alone(control, tmp_path, capsys, caplog, asp):
    class Other(asp.AdaptiveSpeculativeParams):  # a release that renamed its buckets
        def __init__(self):
            self.calls = 0

        def on_verify_complete(self, num_correct_drafts_per_req, batch_size):
            self.calls += 1
            return None

    sc.uninstall()  # wrap the subclass's own method, as the release table would name it
    owner_method = vars(Other)["on_verify_complete"]
    Other.on_verify_complete = wrapt.FunctionWrapper(
        owner_method, sc._wrapper(sc.Controller(str(tmp_path / "schedule.json")))
    )
    control(pin=2)
    other = Other()
    assert other.on_verify_complete([1], 1) is None and other.calls == 1
    assert "disabled: SGLang's router has no _slots" in said(capsys, caplog)
