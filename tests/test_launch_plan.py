"""launcher/plan.py (the one launch builder) and common/server_argv.py (the one view
of an argument list): unit tests, no SGLang needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import plan as launch_plan
from sgl_eagle_ext.launcher.plan import LaunchRequest, build

V23 = "0.5.23"  # cuda-graph-max-bs is spelled -decode there
V10 = "0.5.10.post1"


def req(**kw) -> LaunchRequest:
    kw.setdefault("model_path", "/m/target")
    kw.setdefault("sglang_version", V23)
    return LaunchRequest(**kw)


# -- the argv view --


def test_view_reads_flags_as_argparse_does():
    a = ServerArgv(
        ["--port", "1", "--model-path=/m", "--port=2", "--disable-cuda-graph", "--host", "h"]
    )
    assert a.value("port") == "2" and a.value("--port") == "2"  # last wins, dashes optional
    assert a.model_path == "/m" and a.host == "h" and a.port_text == "2"
    assert a.has("disable-cuda-graph") and not a.has("tp-size")
    assert a.switch("disable-cuda-graph") == "" and a.switch("tp-size") is None
    assert a.values("port") == ["1", "2"]
    assert a == [
        "--port",
        "1",
        "--model-path=/m",
        "--port=2",
        "--disable-cuda-graph",
        "--host",
        "h",
    ]
    assert list(a)[:2] == ["--port", "1"] and len(a) == 7


def test_view_edge_cases():
    a = ServerArgv(["--port", "7", "--port"])  # a bare last occurrence keeps the earlier value
    assert a.value("port") == "7" and a.last_of("port") is None
    assert ServerArgv([]).host == "127.0.0.1" and ServerArgv([]).port_text == "30000"
    b = ServerArgv(["--tp", "4", "--tensor-parallel-size", "2"])
    assert b.tp_size == 4  # first spelling given (the launch table's order)
    assert b.last_of("tp-size", "tp", "tensor-parallel-size") == "2"  # argparse: last on line
    assert ServerArgv(["--tp-size", "x"]).tp_size == 1  # not a number: the default
    c, key = ServerArgv(["--api-key", "s3", "--port", "1", "--api-key=t"]).without("api-key")
    assert key == "t" and c == ["--port", "1"]
    assert ServerArgv(["--x", "--y"]).switch("x") == ""  # bare, followed by another flag
    d = ServerArgv(["--speculative-draft-model-path", "/d", "--speculative-draft-model-path=/e"])
    assert d.with_value("speculative-draft-model-path", "/o") == [
        "--speculative-draft-model-path",
        "/o",
        "--speculative-draft-model-path=/o",
    ]
    spec = ServerArgv(
        [
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "4",
        ]
    )
    assert (spec.num_steps, spec.topk, spec.num_draft_tokens) == (3, 1, 4)


# -- build --


def test_build_renders_the_preset_for_the_release():
    p = build(req(preset="eagle3-2step", draft_model_path="/m/draft"))
    assert p.release.version == V23 and p.preset.name == "eagle3-2step"
    assert p.flag("speculative-num-steps") == "2"
    assert p.speculative == launch_plan.Speculative("EAGLE3", 2, 4, 16)
    assert p.model_path == "/m/target" and p.draft_model_path == "/m/draft"
    assert p.tp_size == 8 and p.port == 30000 and p.host == "127.0.0.1"
    assert p.has("cuda-graph-max-bs-decode") and not p.has("cuda-graph-max-bs")
    assert p.env["NCCL_PROTO"] == "LL"
    assert p.command()[1:3] == ["-m", "sgl_eagle_ext.in_sglang.serve"]
    old = build(req(preset="eagle3-2step", draft_model_path="/m/draft", sglang_version=V10))
    assert old.has("cuda-graph-max-bs") and not old.has("cuda-graph-max-bs-decode")


def test_extra_args_override_the_preset_and_the_key_is_taken_out():
    p = build(
        req(
            preset="eagle3-3step",
            draft_model_path="/d",
            extra=("--speculative-num-steps", "5", "--port", "30123", "--api-key", "s3cr3t-k"),
            env={"NCCL_PROTO": "Simple", "EXTRA": 1},
        )
    )
    assert p.argv.values("speculative-num-steps") == ["5"]  # the preset's value dropped
    assert p.port == 30123 and p.api_key == "s3cr3t-k" and not p.has("api-key")
    assert "s3cr3t" not in repr(p)
    assert p.env["NCCL_PROTO"] == "Simple" and p.env["EXTRA"] == "1"
    assert p.notes == ()


def test_overlays_and_cpu(tmp_path):
    mine = tmp_path / "mine.toml"
    mine.write_text('[server]\ntp-size = 2\n[env]\nFOO = "bar"\n')
    p = build(req(preset="baseline", overlays=(str(mine),), cpu=True))
    assert p.preset.name == "baseline+mine+cpu"
    assert p.flag("device") == "cpu" and p.env["FOO"] == "bar"
    with pytest.raises(UserError, match="no such overlay"):
        build(req(preset="baseline", overlays=("nope",)))


def test_bad_requests_fail_before_anything_starts():
    with pytest.raises(UserError, match="no preset given"):
        build(LaunchRequest(model_path="/m"))
    with pytest.raises(UserError, match="no target model"):
        build(LaunchRequest(preset="baseline", sglang_version=V23))
    with pytest.raises(UserError, match="no draft model"):
        build(req(preset="eagle3-2step"))
    with pytest.raises(UserError, match="SM120"):
        build(req(preset="baseline", extra=("--attention-backend", "trtllm_mla")))
    forced = build(req(preset="baseline", force=True, extra=("--attention-backend=trtllm_mla",)))
    assert forced.flag("attention-backend") == "trtllm_mla"


def test_notes_are_returned_not_printed(capsys):
    p = build(req(preset="baseline", draft_model_path="/d", extra=("--cuda-graph-max-bs", "4")))
    assert capsys.readouterr() == ("", "")
    assert any("does not speculate" in n for n in p.notes)
    assert any("spells --cuda-graph-max-bs as --cuda-graph-max-bs-decode" in n for n in p.notes)


def test_adaptive_resolution(tmp_path):
    p = build(req(preset="eagle3-adaptive", draft_model_path="/d"))
    cfg = p.flag("speculative-adaptive-config")
    assert cfg and json.loads(Path(cfg).read_text())  # resolved to a real shipped file
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"1": {"candidate_steps": [1, 2]}, "8": {"candidate_steps": [1]}}))
    p = build(req(preset="eagle3-adaptive", draft_model_path="/d", adaptive_config=table))
    assert p.flag("speculative-adaptive-config") == str(table.resolve())
    # the preset's 3 steps is no candidate: SGLang's own choice for the table (the middle)
    assert p.speculative.num_steps == 2 and p.speculative.num_draft_tokens == 3
    assert p.notes == (
        f"note: adaptive config {table} has no 3-step candidate; starting at 2 steps "
        "(SGLang's choice for this table)",
    )
    kept = build(
        req(
            preset="eagle3-adaptive",
            draft_model_path="/d",
            adaptive_config=table,
            extra=("--speculative-num-steps", "1"),
        )
    )
    assert kept.speculative.num_steps == 1 and kept.notes == ()
    with pytest.raises(UserError, match="not adaptive"):
        build(req(preset="eagle3-3step", draft_model_path="/d", adaptive_config=table))
    with pytest.raises(UserError, match="no --speculative-adaptive"):
        build(req(preset="eagle3-adaptive", draft_model_path="/d", sglang_version=V10))


def test_with_argv_keeps_the_rest():
    p = build(req(preset="baseline"))
    q = p.with_argv([*p.argv, "--port", "4"])
    assert q.port == 4 and p.port == 30000 and q.env == p.env and q.preset is p.preset


def test_sm120_violations_in_order():
    args = ["--attention-backend", "trtllm_mla", "--enable-flashinfer-allreduce-fusion"]
    assert launch_plan.sm120_violations(args) == [
        "--attention-backend trtllm_mla",
        "--enable-flashinfer-allreduce-fusion",
    ]
    assert launch_plan.sm120_violations(["--attention-backend", "triton"]) == []


def test_canonical_flag_knows_aliases_and_renames():
    r = releases.BY_VERSION[V23]
    assert launch_plan.canonical_flag("--cuda-graph-max-bs-decode=8", r) == "cuda-graph-max-bs"
    assert launch_plan.canonical_flag("--tp", r) == "tp-size"
    assert launch_plan.canonical_flag("value", r) is None
