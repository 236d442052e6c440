"""Preflight's verdicts by SGLang itself (the harness's 0.5.23 asked in a subprocess about
the exact launch) and by the rules of a dry run, which must agree with it.

The rules cases failed before their fix: the rules assumed 2048 for a target without a
length key, read a per-layer rope factor SGLang never reads, and refused ids -1 / 0
that the release captures. The probe cases (issue 23) each failed before theirs: the
target class found by a source-text scan, Mixtral's missing capture method passing,
a config SGLang refuses (remote code, a transformers validation error) dropped or
crashing the probe, LongCat's num_layers and Gemma-3's default vocab_size refused,
the launch's own arguments never reaching SGLang, a relative --model-path failing.

Every harness case of the module is asked of SGLang in ONE probe subprocess (the
`asked` fixture stores the answers in a module cache); each test's preflight then
reads its launch's answer from that cache, which the test asserts (a cache miss would
mean the preflight asked about another launch than the one the fixture asked about).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import ask_sglang, probe_cache, run
from sgl_eagle_ext.launcher.preflight.cli import main as preflight_main
from sgl_eagle_ext.launcher.preflight.runner import probe_argv

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"  # the harness's SGLang 0.5.23
R = releases.BY_VERSION
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 1000,
}
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1000,
}
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 28}
GEMMA3 = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        **SMALL,
    },
}


def _dir(root: Path, name: str, cfg: dict) -> str:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def _ids(ids) -> dict:
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


# (name, target, draft, --context-length, release of the dry run, the error expected or None)
CASES = [
    (
        "qwen3-no-length-key",  # defect 1: class default 32768 > the draft's 4096
        {**QWEN3, **SMALL},
        {**DRAFT, "max_position_embeddings": 4096},
        None,
        "0.5.23",
        "context.draft-shorter",
    ),
    (
        "gemma3-per-layer-rope-draft",  # defect 2: SGLang derives 131072, the draft fits
        GEMMA3,
        {**DRAFT, "max_position_embeddings": 131072},
        None,
        "0.5.23",
        None,
    ),
    (
        "gemma3-per-layer-rope-262144",  # defect 2: beyond the target's 131072
        GEMMA3,
        {**DRAFT, "max_position_embeddings": 262144},
        "262144",
        "0.5.23",
        "context.over-target",
    ),
    (
        "qwen3-embedding-id",  # defect 3: -1 is captured on 0.5.23 (Llama's capture path)
        {**QWEN3, **SMALL, "max_position_embeddings": 4096},
        {**DRAFT, "max_position_embeddings": 4096, **_ids([-1, 13, 25])},
        None,
        "0.5.23",
        None,
    ),
    (
        "glm4-moe-embedding-id",
        {
            "architectures": ["Glm4MoeForCausalLM"],
            "model_type": "glm4_moe",
            "num_hidden_layers": 46,
        },
        {**DRAFT, "max_position_embeddings": 131072, **_ids([-1, 23, 43])},
        None,
        "0.5.23",
        None,
    ),
    (
        "deepseek-layer-0",  # defect 3: id 0 is the embedding output on 0.5.16+
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "num_hidden_layers": 61,
            "max_position_embeddings": 4096,
        },
        {**DRAFT, "max_position_embeddings": 4096, **_ids([0, 30, 58])},
        None,
        "0.5.16",
        None,
    ),
]
REFUSALS = {"context.draft-shorter", "context.over-target", "aux.embedding", "aux.out-of-range"}


def _errors(report) -> set[str]:
    return {f.id for f in report.findings if f.severity == "error"}


@pytest.mark.parametrize("name, target, draft, length, version, error", CASES)
def test_dry_run_rules_give_sglangs_verdict(tmp_path, name, target, draft, length, version, error):
    t, d = _dir(tmp_path, "t", target), _dir(tmp_path, "d", draft)
    args = ["--context-length", length] if length else []
    report = run(t, d, R[version], args, host_checks=False, ask=False)
    assert _errors(report) & REFUSALS == ({error} if error else set()), report.render()
    rule = next(f for f in report.findings if f.id == "context.rule")
    assert rule.data["verdict"] == "predicted from the release table"


# -- SGLang itself, asked once per module -------------------------------------------------
ENV = {**os.environ, "EAGLE_EXT_CPU": "1"}  # the CPU harness: the server entry's stand-in
CPU = ["--device", "cpu"]
MIXTRAL = {  # Mixtral-8x7B's public config fields
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_theta": 1e6,
}
BAILING = {  # Ling-mini-2.0 (Bailing MoE V2): its modeling code ships in the repository
    "architectures": ["BailingMoeV2ForCausalLM"],
    "model_type": "bailing_moe",
    "auto_map": {
        "AutoConfig": "configuration_bailing_moe_v2.BailingMoeV2Config",
        "AutoModelForCausalLM": "modeling_bailing_moe_v2.BailingMoeV2ForCausalLM",
    },
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "num_hidden_layers": 20,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "vocab_size": 157184,
    "max_position_embeddings": 32768,
}
LONGCAT = {  # LongCat-Flash: `num_layers`, no num_hidden_layers
    "architectures": ["LongcatFlashForCausalLM"],
    "model_type": "longcat_flash",
    "hidden_size": 6144,
    "num_layers": 28,
    "num_attention_heads": 64,
    "vocab_size": 131072,
    "max_position_embeddings": 131072,
    "ffn_hidden_size": 12288,
    "expert_ffn_hidden_size": 2048,
    "n_routed_experts": 512,
    "moe_topk": 12,
    "zero_expert_num": 256,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
GEMMA3_27B = {  # gemma-3-27b-it: its text_config has no vocab_size (the class default)
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "num_hidden_layers": 62,
        "sliding_window": 1024,
        "query_pre_attn_scalar": 168,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
    },
    "mm_tokens_per_image": 256,
}
QWEN35_TEXT = {  # a Qwen3.5 text-only checkpoint (hybrid linear/full attention)
    "architectures": ["Qwen3_5ForCausalLM"],
    "model_type": "qwen3_5_text",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "num_hidden_layers": 32,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}


def _draft(hidden: int, vocab: int, length: int, **more) -> dict:
    return {
        **DRAFT,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": vocab,
        "max_position_embeddings": length,
        **more,
    }


# SpecForge's GLM-4.7-Flash draft: hidden 2048 over 20 heads (transformers refuses it)
GLM_FLASH_DRAFT = _draft(2048, 154880, 4096, num_attention_heads=20, num_key_value_heads=4)
# SpecForge's Qwen2.5-VL-32B draft (configs/qwen2.5-vl-32b-eagle3.json): hidden 5120 over 28
# heads of 128; transformers 5.x's LlamaConfig refuses it whatever head_dim says
QWEN25_VL_DRAFT = _draft(
    5120, 152064, 8192, num_attention_heads=28, num_key_value_heads=4, head_dim=128
)
QWEN3_SHORT = ({**QWEN3, **SMALL}, {**DRAFT, "max_position_embeddings": 4096})
OVERRIDE = '{"max_position_embeddings": 2048}'

# name -> (target config, draft config or None, SGLang arguments of the launch)
LAUNCHES = {
    **{name: (t, d, (["--context-length", n] if n else [])) for name, t, d, n, _, _ in CASES[:5]},
    "qwen3-short-draft": (*QWEN3_SHORT, []),
    "qwen3-override-args": (*QWEN3_SHORT, ["--json-model-override-args", OVERRIDE]),
    "qwen3-context-length": (*QWEN3_SHORT, ["--context-length", "4096"]),
    "qwen3.5-text": (
        QWEN35_TEXT,
        _draft(4096, 248320, 262144, **_ids([1, 15, 28])),
        # what SGLang asks of a hybrid model on CPU (its words, refusing the defaults)
        ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"],
    ),
    "mixtral": (MIXTRAL, _draft(4096, 32000, 32768), []),
    "bailing-remote-code": (BAILING, _draft(2048, 157184, 32768), []),
    "glm-flash-draft": ({**QWEN3, **SMALL}, GLM_FLASH_DRAFT, []),
    "qwen2.5-vl-32b-draft": ({**QWEN3, **SMALL}, QWEN25_VL_DRAFT, []),
    "longcat-num-layers": (LONGCAT, _draft(6144, 131072, 131072), []),
    "gemma3-default-vocab": (GEMMA3_27B, _draft(5376, 262208, 131072), []),
    "relative-paths": (*QWEN3_SHORT, ["--context-length", "4096"]),
    # the same relative arguments, from another directory: its target is another model
    "relative-paths-elsewhere": (
        LONGCAT,
        _draft(6144, 131072, 131072),
        ["--context-length", "4096"],
    ),
}
ELSEWHERE = "elsewhere"  # that launch's working directory, in the cases' folder


@pytest.fixture(scope="module")
def asked(tmp_path_factory):
    """{name: (target dir, draft dir, args)} with SGLang's answers for all of them in the
    module's cache, asked in one probe subprocess; the working directory is the cases'
    folder (a relative --model-path means the same to the fixture and to the tests),
    but for the launch asked from ELSEWHERE."""
    root = tmp_path_factory.mktemp("asked")
    mp = pytest.MonkeyPatch()
    mp.setenv("EAGLE_EXT_CACHE", str(root / "cache"))
    mp.delenv(probe_cache.BYPASS, raising=False)
    mp.chdir(root)
    runs = []
    real = ask_sglang._probe
    mp.setattr(ask_sglang, "_probe", lambda *a: runs.append(1) or real(*a))
    cases, launches = {}, []
    for i, (name, (target, draft, args)) in enumerate(LAUNCHES.items()):
        home = root / ELSEWHERE if name == "relative-paths-elsewhere" else root
        home.mkdir(exist_ok=True)
        t, d = _dir(home, f"t{i}", target), _dir(home, f"d{i}", draft) if draft else None
        if name.startswith("relative-paths"):
            t, d = "t", "d"
            (home / f"t{i}").rename(home / t)
            (home / f"d{i}").rename(home / d)
        cases[name] = (t, d, [*CPU, *args])
        argv = probe_argv(t, d, [*CPU, *args], d is not None)
        launches.append(ask_sglang.Launch(argv, ENV, str(home)))
    t0 = time.monotonic()
    answers = ask_sglang.ask_launches(str(PYTHON), launches)
    took = time.monotonic() - t0
    print(f"\nprobe, cold: {len(launches)} launches asked in one subprocess in {took:.1f} s")
    assert all(a is not None for a, _ in answers), [why for _, why in answers]
    assert len(runs) == 1, "the launches were not asked in one subprocess"
    t0 = time.monotonic()
    again = ask_sglang.ask_launches(str(PYTHON), launches)
    print(f"probe, warm (the cache): {len(launches)} launches in {time.monotonic() - t0:.2f} s")
    assert all(a.cached_at for a, _ in again) and len(runs) == 1
    mp.setattr(ask_sglang, "_probe", real)
    yield cases
    mp.undo()


def _asked_run(asked, name: str, **kw):
    t, d, args = asked[name]
    report = run(
        t, d, R["0.5.23"], args, host_checks=False, sglang_python=str(PYTHON), env=ENV, **kw
    )
    note = next((f for f in report.findings if f.id == "sglang.asked"), None)
    assert note is not None, report.render()
    assert note.data["cached_at"], "preflight asked about another launch than the fixture"
    return report


def _by_sglang(report) -> set[str]:
    return {f.id for f in report.findings if str(f.data.get("verdict", "")).startswith("by SGLang")}


@pytest.mark.harness  # asks the harness's SGLang 0.5.23
@pytest.mark.parametrize("name, target, draft, length, version, error", CASES[:5])
def test_sglang_itself_gives_the_verdict(asked, name, target, draft, length, version, error):
    report = _asked_run(asked, name)
    assert _errors(report) & REFUSALS == ({error} if error else set()), report.render()
    # SGLang's resolution refuses an over-long --context-length itself: its ModelConfig's
    # verdict stands, the rest of that launch is not asked further
    scope = "context." if error == "context.over-target" else ""
    verdicts = {
        f.data["verdict"]
        for f in report.findings
        if "verdict" in f.data and f.id.startswith(scope) and f.id != "sglang.settings"
    }
    assert {v.split(" (cached")[0] for v in verdicts} == {"by SGLang 0.5.23"}, report.render()


@pytest.mark.harness
def test_the_settings_view_is_sglangs_own_resolution(asked):
    report = _asked_run(asked, "qwen3-short-draft")
    view = next(f for f in report.findings if f.id == "sglang.settings")
    assert "max_running_requests: unset -> 48, by `_handle_eagle_family`" in view.message
    assert "disable_overlap_schedule: False -> True, by `_disable_overlap_schedule_for_cpu`" in (
        view.message
    )
    t, d, args = asked["qwen3-short-draft"]
    res = ask_sglang.settings_for(str(PYTHON), probe_argv(t, d, args, True), ENV)
    assert res.source == "sglang" and res.cached_at and res.version == "0.5.23"
    assert res.fields["max_running_requests"] == 48 and res.fields["speculative_algorithm"]
    change = next(c for c in res.changes if c.field == "max_running_requests")
    assert (change.before, change.after, change.by) == (None, 48, "_handle_eagle_family")
    assert ask_sglang.settings_for(str(PYTHON.parent / "no-python"), [], {}) is None


@pytest.mark.harness
def test_preflight_prints_which_verdicts_came_from_sglang(asked, capsys, monkeypatch):
    monkeypatch.setenv("EAGLE_EXT_CPU", "1")  # ENV: the same launch environment
    t, d, args = asked["qwen3-short-draft"]
    pair = ["--model-path", t, "--draft-model-path", d, "--no-host"]
    rc = preflight_main([*pair, "--sglang-python", str(PYTHON), "--", *args])
    out = capsys.readouterr().out
    assert rc == 1 and "verdicts by SGLang 0.5.23 itself" in out and "cached answer" in out
    line = next(ln for ln in out.splitlines() if "context.draft-shorter" in ln)
    assert "by SGLang 0.5.23" in line and "32768" in line
    assert "max_running_requests: unset -> 48, by `_handle_eagle_family`" in out
    preflight_main([*pair, "--rules-only", "--", *args])
    assert "predicted from the release table" in capsys.readouterr().out


@pytest.mark.harness
def test_the_launchs_own_arguments_reach_sglang(asked):
    """A 4096 draft for a 32768 target: SGLang refuses it, and serves it with an override
    that shortens both (it applies to the draft's config too) or with --context-length."""
    assert "context.draft-shorter" in _errors(_asked_run(asked, "qwen3-short-draft"))
    for name in ("qwen3-override-args", "qwen3-context-length"):
        report = _asked_run(asked, name)
        assert not report.errors, report.render()
        ok = next(f for f in report.findings if f.id == "context.ok")
        assert ok.data["verdict"].startswith("by SGLang 0.5.23")


@pytest.mark.harness
def test_a_relative_model_path_is_asked_where_the_launch_runs(asked, monkeypatch):
    """The same relative arguments asked in one subprocess for two launches that run in
    two directories: each answer is SGLang's reading of its own directory's model, and
    each is cached under its own launch (its directory) for the preflight there."""
    report = _asked_run(asked, "relative-paths")
    assert not report.errors and "context.ok" in _by_sglang(report), report.render()
    monkeypatch.chdir(ELSEWHERE)
    there = _asked_run(asked, "relative-paths-elsewhere")
    assert not there.errors, there.render()
    ours = next(f for f in report.findings if f.id == "sglang.asked")
    theirs = next(f for f in there.findings if f.id == "sglang.asked")
    assert "Qwen3ForCausalLM" in ours.message and "LongcatFlashForCausalLM" in theirs.message


@pytest.mark.harness
def test_the_target_class_is_the_one_sglangs_loader_picks(asked):
    """The class comes from SGLang's own loader (its registry), never a source-text scan.
    Qwen3.5 text-only: qwen3_5.py also holds a class named Qwen3_5ForCausalLM (an inner
    one: the scan picked it and labelled its ids "by SGLang"); the registered one lives
    in qwen3_5_text.py, which this CPU harness cannot import (its sgl_kernel stand-in
    lacks the fused kernel), so SGLang here refuses the target: that refusal, in its
    words, and no capture verdict claimed for SGLang."""
    qwen3 = _asked_run(asked, "qwen3-short-draft")
    note = next(f for f in qwen3.findings if f.id == "sglang.asked")
    assert "its model loader's class (Qwen3ForCausalLM)" in note.message
    eff = next(f for f in qwen3.findings if f.id == "aux.effective")
    assert eff.data["verdict"].startswith("by SGLang 0.5.23")
    report = _asked_run(asked, "qwen3.5-text")
    refusal = next(f for f in report.errors if f.id == "arch.sglang-refused")
    assert "Qwen3_5ForCausalLM" in refusal.message, report.render()
    assert "aux.sglang-raised" not in {f.id for f in report.findings}
    eff = next(f for f in report.findings if f.id == "aux.effective")
    assert eff.data["verdict"] == "predicted from the release table"


@pytest.mark.harness
def test_a_target_without_the_capture_method_is_refused_in_sglangs_words(asked):
    report = _asked_run(asked, "mixtral")
    refusal = next(f for f in report.findings if f.id == "aux.sglang-refused")
    assert refusal.severity == "error" and refusal.file.endswith("config.json")
    assert "MixtralForCausalLM does not implement set_eagle3_layers_to_capture" in refusal.message
    t, d, args = asked["mixtral"]  # the dry run (no SGLang asked) predicts the refusal
    rules = run(t, d, R["0.5.23"], args, host_checks=False, ask=False)
    found = next(f for f in rules.findings if f.id == "aux.no-capture")
    assert found.severity == "error" and "predicted" in found.message


@pytest.mark.harness
def test_a_config_sglang_refuses_is_its_error_and_no_verdict_claims_sglang(asked):
    report = _asked_run(asked, "bailing-remote-code")
    t, _, _ = asked["bailing-remote-code"]
    refusal = next(f for f in report.errors if "trust_remote_code" in f.message)
    assert refusal.file == str(Path(t) / "config.json") and "--trust-remote-code" in refusal.fix
    claimed = _by_sglang(report) - {refusal.id}
    assert not claimed, report.render()  # the context rules decided: labelled predicted
    rule = next(f for f in report.findings if f.id == "context.rule")
    assert rule.data["verdict"] == "predicted from the release table"


@pytest.mark.harness
@pytest.mark.parametrize("case", ["glm-flash-draft", "qwen2.5-vl-32b-draft"])
def test_a_draft_transformers_rejects_is_an_error_and_fix_does_not_call_it_ok(
    asked, tmp_path, case
):
    """The two public drafts SGLang 0.5.23 cannot load (hidden size not a multiple of the
    head count): refused in SGLang's words, on the draft's config; --fix claims nothing."""
    report = _asked_run(asked, case)
    _, d, _ = asked[case]
    refusal = next(f for f in report.errors if "not a multiple" in f.message)
    assert refusal.file == str(Path(d) / "config.json"), report.render()
    fixed = _asked_run(asked, case, fix=True, overlay_root=tmp_path / "overlays")
    assert not fixed.ok and fixed.overlay is None, fixed.render()
    assert any(f.message.startswith("--fix wrote") for f in fixed.errors), fixed.render()


@pytest.mark.harness
def test_longcat_num_layers_and_gemma3_default_vocab_load_as_sglang_loads_them(asked):
    longcat = _asked_run(asked, "longcat-num-layers")
    assert not longcat.errors, longcat.render()
    eff = next(f for f in longcat.findings if f.id == "aux.effective")
    assert eff.data["effective"] == [2, 14, 25] and eff.data["verdict"].startswith("by SGLang")
    gemma = _asked_run(asked, "gemma3-default-vocab")
    assert not gemma.errors, gemma.render()
    assert "config.missing-field" not in {f.id for f in gemma.findings}


@pytest.mark.harness  # asks the harness's SGLang 0.5.10.post1 (no resolve_once)
def test_the_v1_release_answers_with_its_post_init_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_EXT_CACHE", str(tmp_path / "cache"))
    old = ROOT / ".venv-0.5.10.post1" / "bin" / "python"
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4}
    t = _dir(tmp_path, "t", {**llama, **SMALL, "max_position_embeddings": 4096})
    d = _dir(tmp_path, "d", {**DRAFT, "max_position_embeddings": 4096})
    res = ask_sglang.settings_for(str(old), probe_argv(t, d, CPU, True), ENV)
    assert res is not None and res.source == "sglang" and res.version == "0.5.10.post1", res
    change = next(c for c in res.changes if c.field == "max_running_requests")
    assert (change.before, change.after) == (None, 48)
    assert change.by == "_handle_speculative_decoding"  # the __post_init__ step that set it


def test_the_rules_load_longcat_and_gemma3_27b_as_sglang_does(tmp_path):
    """Without SGLang: LongCat-Flash's num_layers places the aux layers, and Gemma-3's
    text_config without vocab_size (the class default) is no refusal."""
    for name, target, draft in (
        ("longcat", LONGCAT, _draft(6144, 131072, 131072)),
        ("gemma3", GEMMA3_27B, _draft(5376, 262208, 131072)),
    ):
        t, d = _dir(tmp_path, f"{name}-t", target), _dir(tmp_path, f"{name}-d", draft)
        report = run(t, d, R["0.5.23"], CPU, host_checks=False, ask=False)
        assert not report.errors, report.render()
        if name == "longcat":
            eff = next(f for f in report.findings if f.id == "aux.effective")
            assert eff.data["effective"] == [2, 14, 25]
        else:
            note = next(f for f in report.findings if f.id == "shape.unchecked")
            assert note.field == "text_config.vocab_size" and "predicted" in note.message


def test_a_failing_sglang_falls_back_to_the_rules_with_one_line(tmp_path):
    fake = tmp_path / "python"  # answers the version, then fails like a broken install
    fake.write_text(
        '#!/bin/sh\ncase "$2" in *importlib.metadata*) echo 0.5.23; exit 0;; esac\n'
        "echo 'ImportError: no module named torch' >&2; exit 1\n"
    )
    fake.chmod(0o755)
    t = _dir(tmp_path, "t", {**QWEN3, **SMALL})
    d = _dir(tmp_path, "d", {**DRAFT, "max_position_embeddings": 4096})
    report = run(t, d, R["0.5.23"], [], host_checks=False, sglang_python=str(fake))
    notes = [f for f in report.findings if f.id.startswith("sglang.")]
    assert [f.id for f in notes] == ["sglang.unavailable"], report.render()
    assert (
        "ImportError" in notes[0].message and "predicted from the release table" in notes[0].message
    )
    assert "context.draft-shorter" in _errors(report)  # the (fixed) rules still decide
