"""launcher/runtime_states.py: the speculative runtime states and CUDA graphs a launch
builds (issue 24: SGLang's memory estimate has no term for adaptive's extra states), and
the preflight note that prints them. The rules are checked against the installed
SGLang's own functions in a subprocess (harness)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher import runtime_states
from sgl_eagle_ext.launcher.preflight import adaptive

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "launch" / "adaptive" / "kimi-k2.5-sm120.json"
R23 = releases.BY_VERSION["0.5.23"]


def test_tune_live_server_builds_one_state_per_step_with_every_batch_size():
    sizes = runtime_states.capture_batch_sizes(48, speculative=True)
    assert len(sizes) == 23 and sizes[-1] == 48
    plan = runtime_states.count(5, {lv: [0, 1, 2, 3, 4, 5] for lv in (1, 2, 4, 8)}, sizes)
    assert [s.steps for s in plan.states] == [5, 0, 1, 2, 3, 4]  # the startup state first
    assert plan.extra_states == 5
    # issue 24's figures: 138 verify + 138 draft-extend + 92 draft-decode (steps 0, 1 have none)
    assert (plan.total("verify"), plan.total("draft_extend"), plan.total("draft_decode")) == (
        138,
        138,
        92,
    )
    assert "6 speculative runtime state(s) (steps 5,0,1,2,3,4)" in plan.line()
    assert "(the startup state alone: 23 + 23 + 23)" in plan.line()


def test_states_are_pruned_to_the_batch_sizes_whose_bucket_lists_the_step():
    buckets = {1: [0, 1, 2, 3, 5], 2: [0, 1, 2, 3], 8: [0, 1], 16: [0]}
    sizes = runtime_states.capture_batch_sizes(128, speculative=True)
    plan = runtime_states.count(3, buckets, sizes)
    by = {s.steps: s.batch_sizes for s in plan.states}
    assert by[3] == tuple(sizes)  # the startup state: every size
    assert by[5] == (1,)  # only bucket 1 lists 5
    assert by[2] == tuple(b for b in sizes if b < 8)
    assert by[0] == tuple(sizes)  # every bucket lists 0
    assert (
        runtime_states.bucket_of(buckets, 7) == 2 and runtime_states.bucket_of(buckets, 500) == 16
    )
    assert runtime_states.count(3, None, sizes).extra_states == 0  # a fixed preset
    assert runtime_states.count(3, buckets, []).total("verify") == 0  # graphs off


def test_for_launch_reads_the_final_arguments():
    base = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    buckets = {1: [0, 3, 5]}
    adaptive_args = [*base, "--speculative-adaptive", "--cuda-graph-max-bs-decode", "8"]
    plan = runtime_states.for_launch(adaptive_args, buckets)
    assert [s.steps for s in plan.states] == [3, 0, 5] and len(plan.batch_sizes) == 8
    assert runtime_states.for_launch([*base, "--cuda-graph-max-bs", "8"], buckets).extra_states == 0
    off = runtime_states.for_launch([*adaptive_args, "--disable-cuda-graph"], buckets)
    assert off.batch_sizes == () and len(off.states) == 3
    assert runtime_states.for_launch([*base, "--speculative-adaptive"], buckets) is None  # GPU's
    assert runtime_states.for_launch(["--tp-size", "8"], buckets) is None  # not speculative
    # an explicit list (every shipped preset pins one) as given, clamped to the request pool
    listed = [*adaptive_args, "--cuda-graph-bs-decode", "1", "2", "4", "8", "16"]
    assert runtime_states.for_launch(listed, buckets).batch_sizes == (1, 2, 4, 8, 16)
    capped = runtime_states.for_launch([*listed, "--max-running-requests", "6"], buckets)
    assert capped.batch_sizes == (1, 2, 4)


def test_preflight_notes_the_states_of_the_adaptive_preset():
    argv = [
        "--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1",
        "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4",
        "--speculative-adaptive", "--speculative-adaptive-config", str(SHIPPED),
        "--cuda-graph-max-bs-decode", "128",
    ]  # fmt: skip
    (note,) = [f for f in adaptive.check(argv, R23) if f.id == adaptive.STATES_ID]
    assert note.severity == "info"
    assert note.data["states"] == 5 and note.data["steps"] == [3, 0, 1, 2, 5]
    assert "predicted from SGLang 0.5.23" in note.message
    assert "--mem-fraction-static" in note.message
    plan = runtime_states.for_release(argv, R23)
    assert plan is not None and plan.extra_states == 4
    # the shipped preset as launched (its graph sizes a list): the same note
    from sgl_eagle_ext.launcher import plan as launch_plan

    shipped = launch_plan.build(
        launch_plan.LaunchRequest(preset="eagle3-adaptive", model_path="/m", draft_model_path="/d")
    )
    (note,) = [f for f in adaptive.check(shipped.argv, R23) if f.id == adaptive.STATES_ID]
    assert note.data["states"] == 5 and note.data["steps"] == [3, 0, 1, 2, 5]


ORACLE = r"""
import json, sys, types
from sglang.srt.arg_groups.cuda_graph_hook import generate_decode_cuda_graph_batch_sizes
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
cases, table = json.loads(sys.argv[1]), sys.argv[2]
out = {"sizes": [], "pruned": {}}
for spec, pad, max_bs in cases:
    args = types.SimpleNamespace(
        disable_cuda_graph_padding=pad, speculative_algorithm=spec, _resolved_overrides=()
    )
    out["sizes"].append(generate_decode_cuda_graph_batch_sizes(args, max_bs))
params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=table)
params.set_cuda_graph_bs(out["sizes"][0])
out["pruned"] = {s: params.cuda_graph_bs_for_step(s) for s in range(8)}
print(json.dumps(out))
"""


@pytest.mark.harness
def test_rules_match_the_installed_sglang():
    """Capture sizes (generate_decode_cuda_graph_batch_sizes) and per-step pruning
    (AdaptiveSpeculativeParams.cuda_graph_bs_for_step): SGLang's own functions."""
    cases = [
        [spec, pad, max_bs]
        for spec in ("EAGLE3", None)
        for pad in (False, True)
        for max_bs in (1, 7, 48, 128, 160, 300, 512, 600)
    ]
    cases.insert(0, ["EAGLE3", False, 128])  # the one the pruning uses
    run = subprocess.run(
        [sys.executable, "-c", ORACLE, json.dumps(cases), str(SHIPPED)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    sglang = json.loads(run.stdout.strip().splitlines()[-1])
    ours = [runtime_states.capture_batch_sizes(m, s is not None, p) for s, p, m in cases]
    assert ours == sglang["sizes"]
    buckets = {int(k): v["candidate_steps"] for k, v in json.loads(SHIPPED.read_text()).items()
               if k.isdigit()}  # fmt: skip
    plan = runtime_states.count(3, buckets, ours[0])
    for state in plan.states[1:]:  # the startup state is captured before the pruning
        assert list(state.batch_sizes) == sglang["pruned"][str(state.steps)], state.steps


def test_adaptive_preset_and_tune_live_server_leave_room_for_the_states(tmp_path):
    """SGLang's estimate has no term for the extra states: the memory plan (issue 34)
    gives the adaptive preset (and the tune --live server built on it) a lower
    --mem-fraction-static than the fixed presets, which all share one value (the arms
    of a comparison differ only in speculation)."""

    from sgl_eagle_ext.launcher import plan
    from sgl_eagle_ext.tools.tune import live

    def fraction(**kw) -> float:
        req = plan.LaunchRequest(model_path="/m", draft_model_path="/d", sglang_version="0.5.23")
        built = plan.build(plan.LaunchRequest(**{**vars(req), **kw}))
        return float(built.flag("mem-fraction-static"))

    fixed = {
        fraction(preset=p) for p in ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step")
    }
    assert len(fixed) == 1
    assert fraction(preset="eagle3-adaptive") < min(fixed)
    live_file = live.live_preset(None, tmp_path, [1, 2, 4], [0, 1, 2, 3])
    assert fraction(preset_file=str(live_file)) == fraction(preset="eagle3-adaptive")
