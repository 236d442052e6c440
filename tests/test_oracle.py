"""Differential tests: preflight's context-length and aux-layer verdicts against SGLang's own code.

The oracle (tests/sglang_oracle.py) runs in each harness venv -- 0.5.23 (.venv) and
0.5.10.post1 (.venv-0.5.10.post1) -- and answers with that release's transformers and
SGLang: ModelConfig's derived context length and its draft check (the ValueError every
TP worker raises), and each target family's real set_eagle3_layers_to_capture plus
which boundaries its decoder loop can capture. The four releases without a harness get
the aux checks from methods compiled out of their cached pristine wheels. One oracle
call per release, all cases batched. Any disagreement fails.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases, wheels
from sgl_eagle_ext.cpu.harness import STANDIN_DIR
from sgl_eagle_ext.launcher.preflight import aux_layers, context, context_rule, model_dirs

ROOT = Path(__file__).resolve().parent.parent
ORACLE = Path(__file__).with_name("sglang_oracle.py")
FIXTURES = Path(__file__).with_name("fixtures") / "eagle3"
HARNESS = {"0.5.23": ROOT / ".venv", "0.5.10.post1": ROOT / ".venv-0.5.10.post1"}
WHEEL_ONLY = [r.version for r in releases.RELEASES if r.version not in HARNESS]

# ---------------------------------------------------------------- corpus

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "vocab_size": 448,
    "rope_theta": 10000.0,
}
DRAFT = {**LLAMA, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}


def _rope(kind: str, factor: float, original: int | None) -> dict | None:
    if kind == "none":
        return None
    rope = {"rope_type": kind, "factor": factor}
    if kind == "llama3":
        rope.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if kind == "longrope":  # head_dim 64 -> 32 factors
        rope.update(short_factor=[1.0] * 32, long_factor=[float(factor)] * 32)
    if original is not None:
        rope["original_max_position_embeddings"] = original
    return rope


def context_corpus() -> list[dict]:
    cases = []
    target = {
        **LLAMA,
        "max_position_embeddings": 131072,
        "rope_scaling": _rope("llama3", 8.0, 8192),
    }
    for kind, orig, max_pos in itertools.product(
        ("none", "linear", "dynamic", "yarn", "llama3", "longrope"),
        (None, "quarter"),
        (8192, 32768, 131072),
    ):
        if kind in ("none", "linear", "dynamic") and orig:
            continue
        rope = _rope(kind, 4.0, max_pos // 4 if orig else None)
        draft = {**DRAFT, "max_position_embeddings": max_pos}
        if rope:
            draft["rope_scaling"] = rope
        cases.append({"target": target, "draft": draft})
        cases.append({"target": draft | {"architectures": ["LlamaForCausalLM"]}})  # as a target
    # the legacy "type" key, rope_parameters instead of rope_scaling, a top-level
    # original_max_position_embeddings (Phi-3 style), and --context-length
    yarn_type = {"type": "yarn", "factor": 4.0}
    cases += [
        {
            "target": target,
            "draft": {**DRAFT, "max_position_embeddings": 32768, "rope_scaling": yarn_type},
        },
        {
            "target": target,
            "draft": {
                **DRAFT,
                "max_position_embeddings": 32768,
                "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0},
            },
        },
        {
            "target": target,
            "draft": {
                **DRAFT,
                "max_position_embeddings": 32768,
                "original_max_position_embeddings": 8192,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
            },
        },
        {
            "target": target,
            "draft": {**DRAFT, "max_position_embeddings": 32768},
            "context_length": 32768,
        },
        {
            "target": target,
            "draft": {**DRAFT, "max_position_embeddings": 32768},
            "context_length": 32769,
        },
        {"target": target, "context_length": 262144},
        {"target": {**LLAMA, "max_position_embeddings": 4096, "max_sequence_length": 16384}},
        {"target": {k: v for k, v in LLAMA.items()}},  # no length field: 2048
    ]
    # the published drafters against their targets (a nested text_config for Kimi-K2.5)
    for name, tgt in PAIRS.items():
        cases.append({"target": tgt, "draft": drafter(name)})
    return cases


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    },
}
LLAMA3_70B = {
    **LLAMA,
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": _rope("llama3", 8.0, 8192),
}
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        **DEEPSEEK_V3,
        "max_position_embeddings": 262144,
        "rope_scaling": {**DEEPSEEK_V3["rope_scaling"], "factor": 64.0},
    },
}
PAIRS = {"kimi-k25": KIMI_K25, "deepseek-v3": DEEPSEEK_V3, "llama3-70b": LLAMA3_70B}


def drafter(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}-eagle3.json").read_text())


AUX_TARGETS = {
    "LlamaForCausalLM": 32,
    "DeepseekV3ForCausalLM": 61,
    "KimiK25ForConditionalGeneration": 61,
    "GptOssForCausalLM": 36,
}


def aux_corpus() -> list[dict]:
    cases = []
    for arch, n in AUX_TARGETS.items():
        for ids in (
            None,
            [1, n // 2, n - 3],
            [2, n // 2, n - 3],
            [-1, n // 2, n - 3],
            [0, n // 2, n - 3],
            [1, n // 2, n - 1],
            [1, n // 2, n],
            [2, n // 2, n],
            [1, 1, n // 2],
            [1, n // 2, n + 5],
            [2, n // 2],
        ):
            cases.append({"arch": arch, "n": n, "ids": ids})
    for name, tgt in PAIRS.items():  # the published drafters' ids
        arch = tgt["architectures"][0]
        n = (tgt.get("text_config") or tgt)["num_hidden_layers"]
        ids = drafter(name).get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids")
        cases.append({"arch": arch, "n": n, "ids": ids})
    return cases


# ---------------------------------------------------------------- running the oracle


def _run_oracle(cmd: list[str], cases: dict, tmp: Path) -> dict:
    path = tmp / "cases.json"
    path.write_text(json.dumps(cases))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "EAGLE3_"))}
    env.update(
        PYTHONPATH=STANDIN_DIR,  # the CPU harness's sgl_kernel stand-in, nothing of ours
        SGLANG_USE_CPU_ENGINE="1",
        TRITON_INTERPRET="1",
        HF_HUB_OFFLINE="1",
    )
    proc = subprocess.run(
        [*cmd, str(ORACLE), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ORACLE ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("ORACLE ") :])


@functools.cache
def _cases() -> dict:
    return {"context": context_corpus(), "aux": aux_corpus()}


@pytest.fixture(scope="module", params=list(HARNESS))
def harness(request, tmp_path_factory) -> dict:
    venv = HARNESS[request.param]
    answer = _run_oracle([str(venv / "bin" / "python")], _cases(), tmp_path_factory.mktemp("o"))
    assert answer["version"] == request.param
    return answer


@pytest.fixture(scope="module")
def wheel_answers(tmp_path_factory) -> dict:
    """The four wheel-only releases, answered by one oracle process."""
    pkgs = {v: wheels.source(v) for v in WHEEL_ONLY}  # cached (never downloaded here)
    missing = [v for v, p in pkgs.items() if p is None]
    assert not missing, f"no cached wheel of {missing}: python -m sgl_eagle_ext.wheels VERSION"
    tmp = tmp_path_factory.mktemp("w")
    path = tmp / "cases.json"
    path.write_text(json.dumps(_cases()))
    proc = subprocess.run(
        [sys.executable, str(ORACLE), str(path), *map(str, pkgs.values())],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout.split("ORACLE ", 1)[1])["wheels"]
    return {v: {"version": v, **a} for v, a in zip(pkgs, answers, strict=True)}


@pytest.fixture(params=WHEEL_ONLY)
def wheel_oracle(request, wheel_answers) -> dict:
    return wheel_answers[request.param]


# ---------------------------------------------------------------- preflight's side


def _dir(tmp: Path, name: str, cfg: dict) -> model_dirs.ModelDir:
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    md, found = model_dirs.load(name, "--x", str(d))
    assert md.config is not None, found
    return md


def _by_id(found) -> dict:
    return {f.id: f for f in found}


def context_disagreements(answer: dict, tmp: Path) -> list[str]:
    bad = []
    for i, (case, sg) in enumerate(zip(_cases()["context"], answer["context"], strict=True)):
        target = _dir(tmp, f"t{i}", case["target"])
        draft = _dir(tmp, f"d{i}", case["draft"]) if case.get("draft") else None
        user = str(case["context_length"]) if case.get("context_length") else None
        for pkg in (Path(answer["pkg"]), None):  # SGLang's function on our view; our rule
            found, _ = context.check(
                target, draft, pkg, user, {}, False, None, _release(answer["version"])
            )
            ids = _by_id(found)
            where = f"case {i} ({'own rule' if pkg is None else 'SGLang rule'}): {case}"
            if "len" in sg["target"] or user is None:
                limit = ids["context.rule"].data["target_limit"]
                sg_limit = sg["target"].get("len") if user is None else None
                if sg_limit is not None and limit != sg_limit:
                    bad.append(f"target limit {limit} != SGLang {sg_limit}; {where}")
            over = "context.over-target" in ids
            if over != ("error" in sg["target"]):
                bad.append(f"over-target {over} != SGLang {sg['target']}; {where}")
            if draft is None or "draft" not in sg:
                continue
            if ids.get("context.ok", ids.get("context.draft-shorter")).data["draft_limit"] != sg[
                "draft_own"
            ].get("len"):
                bad.append(f"draft limit differs from SGLang {sg['draft_own']}; {where}")
            refused = "context.draft-shorter" in ids
            if refused != ("error" in sg["draft"]):
                bad.append(f"draft refused={refused} but SGLang: {sg['draft']}; {where}")
    return bad


def _release(version: str) -> releases.Release:
    return releases.BY_VERSION[version]


def aux_disagreements(answer: dict, version: str, tmp: Path) -> list[str]:
    bad = []
    for i, (case, sg) in enumerate(zip(_cases()["aux"], answer["aux"], strict=True)):
        assert "missing" not in sg and "raised" not in sg, (case, sg)
        arch, n, ids = case["arch"], case["n"], case["ids"]
        cfg = {"architectures": [arch], "num_hidden_layers": n}
        if arch.startswith("Kimi"):
            cfg = {"architectures": [arch], "text_config": {"num_hidden_layers": n}}
        target = _dir(tmp, f"at{i}", cfg)
        eagle = {} if ids is None else {"eagle_aux_hidden_state_layer_ids": ids}
        draft = _dir(tmp, f"ad{i}", {**DRAFT, "eagle_config": eagle})
        found = aux_layers.check(target, draft, _release(version), set(), False, None)
        ids_found = _by_id(found)
        where = f"{version} case {i}: {arch} n={n} ids={ids}"
        eff = ids_found["aux.effective"].data["effective"]
        if eff != sg["layers_to_capture"]:
            bad.append(f"preflight captures {eff}, SGLang {sg['layers_to_capture']}; {where}")
        eff_sg = sg["layers_to_capture"]
        if (0 in eff_sg and sg["embedding"] is None) or (n in eff_sg and sg["final"] is None):
            continue  # the loop did not run on stand-ins: the release table decides
        allowed = set(range(1, n))
        allowed |= {0} if sg["embedding"] else set()
        allowed |= {n} if sg["final"] else set()
        sg_ok = set(sg["layers_to_capture"]) <= allowed and len(
            set(sg["layers_to_capture"])
        ) == len(sg["layers_to_capture"])
        refused = {"aux.embedding", "aux.out-of-range", "aux.duplicates"} & set(ids_found)
        if sg_ok == bool(refused):
            bad.append(f"preflight refuses {sorted(refused)}, SGLang captures ok={sg_ok}; {where}")
    return bad


@pytest.mark.harness  # the harness venvs / cached release wheels
def test_context_agrees_with_sglang(harness, tmp_path):
    assert context_disagreements(harness, tmp_path) == []


@pytest.mark.harness  # the harness venvs / cached release wheels
def test_aux_layers_agree_with_sglang(harness, tmp_path):
    assert aux_disagreements(harness, harness["version"], tmp_path) == []


@pytest.mark.harness  # the harness venvs / cached release wheels
def test_aux_layers_agree_with_pristine_wheels(wheel_oracle, tmp_path):
    assert aux_disagreements(wheel_oracle, wheel_oracle["version"], tmp_path) == []


# ---------------------------------------------------------------- the cases, by name


def test_yarn_draft_without_original_is_refused_against_llama31_70b(tmp_path):
    """Defect 1: transformers 5 fills original_max_position_embeddings, so SGLang
    counts the yarn factor as 1 and refuses the 32768-token draft."""
    target = _dir(tmp_path, "t", LLAMA3_70B)
    yarn = {"rope_type": "yarn", "factor": 4.0}
    draft = _dir(tmp_path, "d", {**DRAFT, "max_position_embeddings": 32768, "rope_scaling": yarn})
    found, _ = context.check(target, draft, None, None, {}, False, None)
    shorter = _by_id(found)["context.draft-shorter"]
    assert shorter.severity == "error" and shorter.data["draft_limit"] == 32768


@pytest.mark.parametrize(
    "version, arch, n, ids, refused",
    [
        ("0.5.16", "GptOssForCausalLM", 36, [1, 17, 35], True),
        ("0.5.19", "GptOssForCausalLM", 36, [1, 17, 35], False),  # defect 2
        ("0.5.19", "GptOssForCausalLM", 36, [-1, 17, 34], False),
        ("0.5.21", "LlamaForCausalLM", 32, [-1, 16, 29], True),
        ("0.5.23", "LlamaForCausalLM", 32, [-1, 16, 29], False),  # defect 3
        ("0.5.23", "DeepseekV3ForCausalLM", 61, [-1, 30, 58], True),
    ],
)
def test_boundary_captures_per_release(tmp_path, version, arch, n, ids, refused):
    target = _dir(tmp_path, "t", {"architectures": [arch], "num_hidden_layers": n})
    draft = _dir(
        tmp_path, "d", {**DRAFT, "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
    )
    found = aux_layers.check(target, draft, _release(version), set(), False, None)
    errors = {f.id for f in found if f.severity == "error"}
    assert bool(errors & {"aux.embedding", "aux.out-of-range"}) == refused, errors


def wheel_context_disagreements(answer: dict, tmp: Path) -> list[str]:
    """Derived limits only: without the release's ModelConfig there is no draft check
    to compare, but the check is `effective > draft limit` in every release."""
    bad = []
    for i, (case, sg) in enumerate(zip(_cases()["context"], answer["context"], strict=True)):
        for role in ("target", "draft"):
            if role not in sg or "skip" in sg[role]:
                continue
            md = _dir(tmp, f"{role[0]}{i}", case[role])
            for pkg in (Path(answer["pkg"]), None):
                ours, _ = context_rule.context_length(md.text, pkg)
                if ours != sg[role]["len"]:
                    bad.append(
                        f"{answer['version']} {role} limit {ours} != SGLang {sg[role]['len']} "
                        f"({'SGLang rule' if pkg else 'own rule'}); case {i}: {case[role]}"
                    )
    return bad


@pytest.mark.harness  # the cached release wheels
def test_context_limits_agree_with_pristine_wheels(wheel_oracle, tmp_path):
    assert sum("len" in r for c in wheel_oracle["context"] for r in c.values()) > 20
    assert wheel_context_disagreements(wheel_oracle, tmp_path) == []
