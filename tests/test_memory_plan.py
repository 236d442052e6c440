"""The memory plan (launcher/preflight/memory_plan.py) and SGLang's resolution as on the
target host (preflight/hosts.py, the probe's as_host), issue 34.

The harness tests check the plan against SGLang's own arithmetic on both harness
releases for three public configurations (Kimi-K2.5: a VLM with MLA; DeepSeek-V3: MLA;
Llama-3-70B: GQA): the mem_fraction_static SGLang resolves for a 96 GB SM120 card when
the hardware itself is faked (torch's CUDA answers and an `nvidia-smi` on PATH, SGLang's
own probes untouched), its KV cell size (0.5.10.post1 get_cell_size_per_token, 0.5.23
DefaultPoolConfigurator._compute_cell_size) and, on 0.5.10.post1, its token count
(profile_max_num_token) for the plan's free memory and weights.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import ask_sglang, hosts, memory_plan, weight_bytes

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "models"
DRAFTS = ROOT / "tests" / "fixtures" / "eagle3"
PYTHONS = {
    "0.5.23": ROOT / ".venv" / "bin" / "python",
    "0.5.10.post1": ROOT / ".venv-0.5.10.post1" / "bin" / "python",
}
HOST = hosts.DEFAULT
# public configuration -> what it stands for
CASES = {"kimi-k2.5": "VLM + MLA", "deepseek-v3": "MLA", "llama-3-70b": "GQA"}


def _config(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def _argv(model_dir: Path, release: str) -> list[str]:
    graphs = "--cuda-graph-max-bs" if release == "0.5.10.post1" else "--cuda-graph-max-bs-decode"
    return [
        *("--model-path", str(model_dir), "--tp-size", "8", "--max-running-requests", "128"),
        *(graphs, "128", "--trust-remote-code"),
    ]


# -- without SGLang ------------------------------------------------------------------------


def test_kv_cell_is_the_mla_latent_on_every_rank_and_the_rank_share_of_gqa_heads():
    mla = {"mla": True, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "layers": 61}
    assert memory_plan.cell_bytes(mla, 2) == 576 * 2 * 61  # 70,272 B: Kimi-K2.5, DeepSeek-V3
    gqa = {"mla": False, "kv_heads_per_rank": 1, "head_dim": 128, "v_head_dim": 128, "layers": 80}
    assert memory_plan.cell_bytes(gqa, 2) == 1 * 256 * 80 * 2  # Llama-3-70B at TP 8


def test_int4_experts_dominate_kimi_k25_weights_and_quantization_fields_are_read():
    kimi = weight_bytes.estimate(_config("kimi-k2.5"), 8)
    assert kimi.estimated and 70 * 2**30 < kimi.bytes_per_rank < 74 * 2**30
    assert kimi.parts["routed experts"] > 0.9 * kimi.bytes_per_rank
    unquantized = _config("kimi-k2.5")
    del unquantized["text_config"]["quantization_config"]
    bf16 = weight_bytes.estimate(unquantized, 8)
    # int4 with one bf16 scale per 32 weights: 0.5625 B a parameter against 2
    ratio = kimi.parts["routed experts"] / bf16.parts["routed experts"]
    assert ratio == pytest.approx(0.5625 / 2, rel=1e-3)
    assert weight_bytes.linear_bytes(
        _config("deepseek-v3")["quantization_config"], "model.layers.3.mlp.experts.0.up_proj", 2
    ) == pytest.approx(1 + 4 / 128**2)


def test_header_sizes_split_replicated_and_sharded_tensors():
    sizes = {
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": 800,
        "model.layers.0.input_layernorm.weight": 80,
        "model.layers.0.mlp.experts.0.up_proj.weight_packed": 8000,
    }
    w = weight_bytes.from_headers(sizes, 8)
    assert w.bytes_per_rank == 880 + 1000 and not w.estimated


def test_a_gpu_launch_off_its_host_is_planned_for_the_described_host(monkeypatch):
    monkeypatch.delenv(hosts.ENV, raising=False)
    monkeypatch.setattr(hosts, "accelerator_here", lambda: False)
    assert hosts.for_launch(["--tp-size", "8"], {}) is hosts.DEFAULT
    assert hosts.for_launch(["--device", "cpu"], {}) is None
    assert hosts.for_launch([], {"EAGLE_EXT_CPU": "1"}) is None
    assert hosts.for_launch([], {hosts.ENV: "h200-141gb-x8"}).memory_mib == 143771
    assert hosts.for_launch([], {hosts.ENV: hosts.LOCAL}) is None
    monkeypatch.setattr(hosts, "accelerator_here", lambda: True)
    assert hosts.for_launch([], {}) is None  # a GPU here: SGLang reads it


# -- against SGLang's own arithmetic (harness) --------------------------------------------

# Run by each release's python: SGLang's resolution on hardware faked below SGLang (torch's
# CUDA answers; nvidia-smi is the stand-in on PATH), then its own KV arithmetic.
ORACLE = r"""
import importlib, json, os, pkgutil, sys, types
cases, fake_bin, gpu_mib = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
os.environ["PATH"] = fake_bin + os.pathsep + os.environ["PATH"]
os.environ["FAKE_GPU_MIB"] = str(int(gpu_mib))
import sglang.srt.server_args as S
importlib.import_module("sglang.srt.configs.model_config")
try:  # resolution imports its hooks lazily: import them as on this machine first
    import sglang.srt.arg_groups as G
    for info in pkgutil.walk_packages(G.__path__, "sglang.srt.arg_groups."):
        try:
            importlib.import_module(info.name)
        except Exception:
            pass
except ImportError:
    pass
for name in (  # the KV arithmetic's modules, imported as on this machine too
    "sglang.srt.model_executor.model_runner_kv_cache_mixin",
    "sglang.srt.model_executor.pool_configurator",
    "sglang.srt.mem_cache.kv_cache_configurator",
):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
import torch
torch.cuda.is_available = lambda: True
torch.cuda.get_device_capability = lambda *a, **k: (12, 0)
torch.cuda.device_count = lambda: 8
torch.cuda.get_device_name = lambda *a, **k: "stand-in"
torch.cuda.is_initialized = lambda: True
torch.version.cuda = "12.9"
from sglang.srt.utils import common
for v in list(vars(common).values()):
    if hasattr(v, "cache_clear"):
        v.cache_clear()
from sglang.srt.configs.model_config import AttentionArch, ModelConfig
out = []
for case in cases:
    sa = S.prepare_server_args(case["argv"])
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    got = sa.resolved_dict() if hasattr(sa, "resolved_dict") else vars(sa)
    mc = ModelConfig(case["model"], trust_remote_code=True)
    mla = mc.attention_arch == AttentionArch.MLA
    n = mc.num_hidden_layers
    answer = {"mem_fraction_static": got["mem_fraction_static"]}
    try:  # 0.5.10.post1: the model runner's own methods on a stand-in runner
        from sglang.srt.model_executor import model_runner_kv_cache_mixin as K
    except ImportError:
        from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator
        from sglang.srt.runtime_context import get_parallel
        kvc = types.SimpleNamespace(
            model_config=mc, kv_cache_dtype=torch.bfloat16, kv_cache_dtype_str="auto",
            server_args=types.SimpleNamespace(enable_hisparse=False),
            use_mla_backend=mla, is_draft_worker=False, device="cuda", page_size=1,
        )
        me = DefaultPoolConfigurator.__new__(DefaultPoolConfigurator)
        me.kv_cache_dtype_str = "auto"
        with get_parallel().override(
            attn_tp_size=8, attn_dcp_size=1, enable_dsa_cache_layer_split=False
        ):
            answer["cell"] = me._compute_cell_size(kvc, n)
    else:
        runner = types.SimpleNamespace(
            kv_cache_dtype=torch.bfloat16, use_mla_backend=mla, model_config=mc,
            device="cuda", gpu_id=0, is_draft_worker=False, mambaish_config=None,
            num_effective_layers=n, mem_fraction_static=got["mem_fraction_static"],
            start_layer=0, end_layer=n,
        )
        K.get_attention_tp_size = lambda: 8
        runner.get_cell_size_per_token = lambda k: K.ModelRunnerKVCacheMixin.get_cell_size_per_token(runner, k)
        answer["cell"] = runner.get_cell_size_per_token(n)
        pre, weights = case["free_before_load"], case["weights"]
        K.get_available_gpu_memory = lambda *a, **k: (pre - weights) / (1 << 30)
        K.get_world_group = lambda: types.SimpleNamespace(world_size=1, cpu_group=None)
        answer["tokens"] = K.ModelRunnerKVCacheMixin.profile_max_num_token(runner, pre / (1 << 30))
    out.append(answer)
print("ORACLE " + json.dumps(out))
"""

NVIDIA_SMI = """#!/bin/sh
# stand-in for the driver's tool: memory.total (MiB) of each of the host's GPUs
for i in 1 2 3 4 5 6 7 8; do echo "${FAKE_GPU_MIB}"; done
"""


@pytest.mark.harness
@pytest.mark.parametrize("version", list(PYTHONS))
def test_plan_matches_sglangs_own_arithmetic_for_three_public_configs(version, tmp_path):
    python = PYTHONS[version]
    release = releases.BY_VERSION[version]
    launches, dirs = [], {}
    for name in CASES:
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text((MODELS / f"{name}.json").read_text())
        dirs[name] = d
        env = {**os.environ, hosts.ENV: HOST.key, "EAGLE_EXT_PROBE_CACHE": "0"}
        env.pop("EAGLE_EXT_CPU", None)
        launches.append(ask_sglang.Launch(_argv(d, version), env))
    asked = ask_sglang.ask_launches(str(python), launches)
    plans = {}
    for name, (answer, why) in zip(CASES, asked, strict=True):
        assert answer is not None, why
        assert answer.host and answer.host["memory_mib"] == HOST.memory_mib
        plan, why = memory_plan.for_launch(answer, release, _argv(dirs[name], version))
        assert plan is not None, why
        assert plan.estimated and plan.gpu_bytes == HOST.memory_mib * 2**20
        plans[name] = plan
    assert plans["kimi-k2.5"].vlm_factor and plans["kimi-k2.5"].vlm_factor < 0.95  # its ViT
    assert plans["llama-3-70b"].vlm_factor is None

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(NVIDIA_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    cases = [
        {
            "argv": _argv(dirs[name], version),
            "model": str(dirs[name]),
            "free_before_load": plans[name].before_load,
            "weights": plans[name].target.bytes_per_rank,
        }
        for name in CASES
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE_EXT_CPU", "PYTHONPATH")}
    env["HF_HUB_OFFLINE"] = "1"
    run = subprocess.run(
        [str(python), "-c", ORACLE, json.dumps(cases), str(fake), str(HOST.memory_mib)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("ORACLE ")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    sglang = json.loads(lines[-1][len("ORACLE ") :])
    for name, own in zip(CASES, sglang, strict=True):
        plan = plans[name]
        assert plan.mem_fraction == pytest.approx(own["mem_fraction_static"], abs=1e-9), name
        assert plan.cell_target == own["cell"], name
        if "tokens" in own:  # 0.5.10.post1: the target pool alone (its draft pool is outside)
            assert abs(plan.tokens - own["tokens"]) <= 1, name
    # the VLM shrinks SGLang's own default: Kimi-K2.5's fraction is below DeepSeek-V3's
    assert plans["kimi-k2.5"].mem_fraction < plans["deepseek-v3"].mem_fraction


PRESETS = ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step", "eagle3-adaptive")


def _kimi_pair(root: Path) -> tuple[Path, Path]:
    """Kimi-K2.5's public configuration and its EAGLE-3 draft's, no weights."""
    target, draft = root / "kimi-k2.5", root / "kimi-k2.5-eagle3"
    for d, src in ((target, MODELS / "kimi-k2.5.json"), (draft, DRAFTS / "kimi-k25-eagle3.json")):
        d.mkdir()
        (d / "config.json").write_text(src.read_text())
    return target, draft


def _gpu_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_EXT_CPU"}
    return {**env, hosts.ENV: HOST.key, "EAGLE_EXT_CACHE": str(tmp_path / "cache")}


@pytest.mark.harness
def test_every_preset_fits_the_sm120_host_with_128_requests_of_the_planned_context(tmp_path):
    """The presets' mem fractions were chosen from this plan: each holds 128 running
    requests of MIN_CONTEXT tokens, one request of its context length, and what it
    allocates after the pool (estimated) in what the fraction leaves."""
    from sgl_eagle_ext.launcher import plan

    target, draft = _kimi_pair(tmp_path)
    env = _gpu_env(tmp_path)
    built = [
        plan.build(
            plan.LaunchRequest(
                preset=p,
                model_path=str(target),
                draft_model_path=str(draft),
                sglang_version="0.5.23",
            )
        )
        for p in PRESETS
    ]
    launches = [ask_sglang.Launch(list(b.argv), {**env, **b.env}) for b in built]
    # adaptive without the overlap scheduler: the 0-step catch-up keeps hidden states
    adaptive = built[PRESETS.index("eagle3-adaptive")]
    no_overlap = [*adaptive.argv, "--disable-overlap-schedule"]
    launches.append(ask_sglang.Launch(no_overlap, {**env, **adaptive.env}))
    *asked, (answer, why) = ask_sglang.ask_launches(str(PYTHONS["0.5.23"]), launches)
    kept, _ = memory_plan.for_launch(answer, adaptive.release, no_overlap, env=adaptive.env)
    # 64 positions x 128 requests x 3 aux layers x Kimi-K2.5's 7168 x bf16
    assert kept.catchup_bytes == 64 * 128 * 3 * 7168 * 2, kept.lines()
    assert any("0-step kept hidden states 0.33 GiB" in line for line in kept.lines())
    for name, b, (answer, why) in zip(PRESETS, built, asked, strict=True):
        assert answer is not None, why
        got, why = memory_plan.for_launch(answer, b.release, list(b.argv), env={**env, **b.env})
        assert got is not None, why
        chain = name in ("eagle3-3step", "eagle3-5step", "eagle3-adaptive")
        assert (got.scratch_bytes > 0) == chain, (name, got.scratch_note)  # topk 1 only
        assert got.catchup_bytes == 0  # the overlap scheduler: the per-cycle draft-extend
        assert got.estimated and got.max_running == 128 and got.context_len == 131072
        assert [f.id for f in got.findings()] == ["memory.plan"], got.lines()
        assert got.tokens >= 128 * memory_plan.MIN_CONTEXT, (name, got.lines())
        assert got.slack >= got.slack_needed, (name, got.lines())
    # SGLang's own default on this host, for the same launch: a pool below one request
    unpinned = [*built[1].argv]
    i = unpinned.index("--mem-fraction-static")
    del unpinned[i : i + 2]
    ((answer, why),) = ask_sglang.ask_launches(
        str(PYTHONS["0.5.23"]), [ask_sglang.Launch(unpinned, {**env, **built[1].env})]
    )
    default, _ = memory_plan.for_launch(answer, built[1].release, unpinned)
    assert default.vlm_factor and default.mem_fraction < 0.82  # 0.814 with the preset's chunk
    assert "memory.one-request" in {f.id for f in default.findings()}


@pytest.mark.harness
def test_dry_run_without_a_gpu_prints_sglangs_resolution_for_the_host_and_the_plan(tmp_path):
    target, draft = _kimi_pair(tmp_path)
    env = _gpu_env(tmp_path)
    env.pop(hosts.ENV)  # no GPU here: the default host is described
    run = subprocess.run(
        [
            *(str(PYTHONS["0.5.23"]), "-m", "sgl_eagle_ext.launch", "--dry-run"),
            *("--preset", "eagle3-2step", "--model-path", str(target)),
            *("--draft-model-path", str(draft), "--sglang-version", "0.5.23"),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env={**env, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "(no prediction" not in out
    assert f"# SGLang sets on its own (by SGLang 0.5.23 as on {HOST.name}" in out
    assert "mem_fraction_static: unset" not in out  # the preset pins it
    assert "# memory plan per rank (estimated)" in out
    assert "target weights 71." in out and "(estimated from config.json)" in out
    assert "holds 128 running requests x 1,3" in out
    assert "# error" not in out and "# warning" not in out, out


# SpecForge's GLM-4.7-Flash EAGLE-3 draft: hidden 2048 over 20 heads, which transformers'
# config refuses; a 4096-token context (shorter than its target's).
GLM_FLASH_DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 4096,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 154880,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
}
# SpecForge's Qwen2.5-VL-32B draft: hidden 5120 over 28 heads of 128
QWEN25_VL_DRAFT = {
    **GLM_FLASH_DRAFT,
    "hidden_size": 5120,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "head_dim": 128,
    "vocab_size": 152064,
    "max_position_embeddings": 8192,
}
SMALL_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_hidden_layers": 28,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1000,
    "max_position_embeddings": 40960,
}


@pytest.mark.harness
@pytest.mark.parametrize(
    "draft", [GLM_FLASH_DRAFT, QWEN25_VL_DRAFT], ids=["glm-4.7-flash", "qwen2.5-vl-32b"]
)
def test_gpu_launch_off_host_keeps_sglangs_later_refusals_and_fix_claims_nothing(tmp_path, draft):
    """A GPU launch checked without the GPU: SGLang resolves as on the host, so the
    draft it cannot load is refused in its own words (not a 'draft shorter' error), and
    --fix's overlay is never reported accepted."""
    from sgl_eagle_ext.launcher.preflight import run as preflight

    t, d = tmp_path / "target", tmp_path / "draft"
    for path, cfg in ((t, SMALL_QWEN3), (d, draft)):
        path.mkdir()
        (path / "config.json").write_text(json.dumps(cfg))
    env = _gpu_env(tmp_path)
    args = ["--tp-size", "1"]
    kw = dict(host_checks=False, sglang_python=str(PYTHONS["0.5.23"]), env=env)
    report = preflight(str(t), str(d), releases.BY_VERSION["0.5.23"], args, **kw)
    refusal = next((f for f in report.errors if "not a multiple" in f.message), None)
    assert refusal is not None and refusal.file == str(d / "config.json"), report.render()
    assert "sglang.no-device" not in {f.id for f in report.findings}
    fixed = preflight(
        str(t), str(d), releases.BY_VERSION["0.5.23"], args, fix=True,
        overlay_root=tmp_path / "overlays", **kw,
    )  # fmt: skip
    assert not fixed.ok and fixed.overlay is None, fixed.render()
    assert "accepts the overlay" not in fixed.render()


# -- the pcie-allreduce overlay's size bound (issue 34, item 6) ----------------------------


def _preset_argv(preset: str, tmp_path: Path, adaptive: Path | None = None):
    from sgl_eagle_ext.launcher import plan

    built = plan.build(
        plan.LaunchRequest(
            preset=preset,
            model_path="/m",
            draft_model_path="/d",
            overlays=("pcie-allreduce",),
            sglang_version="0.5.23",
            adaptive_config=adaptive,
        )
    )
    return built.release, list(built.argv), dict(built.env)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_shipped_verify_shape_is_within_the_overlays_bound(preset, tmp_path):
    from sgl_eagle_ext.launcher import nccl

    release, argv, env = _preset_argv(preset, tmp_path)
    bound, shapes = nccl.pcie_bound(release, argv, env, 7168)
    assert bound == {"baseline": 128, "eagle3-2step": 2048, "eagle3-5step": 768}.get(preset, 512)
    assert shapes and not any(s.over for s in shapes), shapes
    if preset == "eagle3-adaptive":
        assert {s.steps: s.widest for s in shapes} == {3: 512, 0: 128, 1: 28, 2: 21, 5: 6}


def test_an_adaptive_state_wider_than_the_startup_one_is_named_with_the_override(tmp_path):
    from sgl_eagle_ext.launcher import nccl

    table = tmp_path / "wide.json"
    table.write_text(
        json.dumps({"1": {"candidate_steps": [0, 3, 5]}, "64": {"candidate_steps": [3, 5]}})
    )
    release, argv, env = _preset_argv("eagle3-adaptive", tmp_path, table)
    note, warnings = nccl.pcie_bound_lines(release, argv, env, 7168)
    assert "up to 512 rows" in note
    (w,) = warnings
    assert "5-step state verifies 6 tokens" in w and "batch sizes 88-128" in w
    assert "SGLANG_PCIE_IPC_MAX_NUMEL=5505024" in w
    covered = {**env, nccl.PCIE_MAX_NUMEL_ENV: "5505024"}
    assert nccl.pcie_bound_lines(release, argv, covered, 7168)[1] == []
    off = {k: v for k, v in env.items() if k != nccl.PCIE_ALLREDUCE_ENV}
    assert nccl.pcie_bound(release, argv, off, 7168) == (None, [])


def _plan(fraction: float, weights_gib: float, **kw) -> memory_plan.Plan:
    fields = dict(
        host="card",
        gpu_bytes=96 * 2**30,
        tp=8,
        version="0.5.23",
        mem_fraction=fraction,
        fraction_by="pinned",
        vlm_factor=None,
        target=weight_bytes.Weights(int(weights_gib * 2**30), "estimated from config.json"),
        draft=None,
        cell_target=70272,
        cell_draft_charged=0,
        cell_draft_own=0,
        activation_bytes=4 * 2**30,
        graph_bytes=2**30,
        graph_count=35,
        graph_note="35 decode graphs",
        max_running=128,
        context_len=131072,
        min_context=1024,
    )
    return memory_plan.Plan(**{**fields, **kw})


def test_findings_name_the_numbers_and_the_fix():
    ok = _plan(0.88, 71.8)
    assert [f.id for f in ok.findings()] == ["memory.plan"]
    assert "(estimated)" in ok.lines()[0]
    short = _plan(0.80, 71.8)  # ~4 GiB of pool: less than one request of 131072
    found = {f.id: f for f in short.findings()}
    assert found["memory.one-request"].severity == "error"
    assert "--context-length" in found["memory.one-request"].fix
    assert "--mem-fraction-static 0.8" in found["memory.one-request"].fix
    assert found["memory.running-requests"].severity == "warning"
    assert f"{short.tokens:,} tokens" in found["memory.running-requests"].message
    full = _plan(0.74, 71.8)  # the weights fill the static memory
    assert [f.id for f in full.findings()][1:] == ["memory.weights"]
    tight = _plan(0.95, 71.8)  # a pool that holds everything, no room after it
    assert "memory.outside-pool" in {f.id for f in tight.findings()}
