"""Every EAGLE-3 target family of each harness release against the project's rules.

One subprocess per release (.venv = 0.5.23, .venv-0.5.10.post1) runs the product's own
driver, sgl_eagle_ext/launcher/preflight/sglang_probe.py, which enumerates every
registered architecture whose class defines set_eagle3_layers_to_capture and answers,
with that release's code:
  - context: ModelConfig's length on configs built on each family's transformers config
    class (class defaults without a length key, each rope type, per-layer rope, a nested
    text_config);
  - aux: the capture indices its own set_eagle3_layers_to_capture leaves for each id set,
    and, where its decoder loop runs on stand-in layers, which boundaries arrive.
The dry-run rules (context_rule.derive, aux_layers.check) must agree with every answer.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.cpu.harness import STANDIN_DIR
from sgl_eagle_ext.launcher.preflight import aux_layers, context_rule, model_dirs
from sgl_eagle_ext.launcher.preflight.sglang_probe import TAG

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "sgl_eagle_ext" / "launcher" / "preflight" / "sglang_probe.py"
HARNESS = {"0.5.23": ROOT / ".venv", "0.5.10.post1": ROOT / ".venv-0.5.10.post1"}
N = 10  # layers of every aux case
DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 1,
}
KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "max_position_embeddings": 262144,
    },
}
# MTP / draft-side classes that also carry the method: never an EAGLE-3 target.
DRAFT_SIDE = ("Eagle", "NextN", "MTP", "Assistant")

_M = 8192
VARIANTS = [
    {},  # class defaults: no length key
    {"max_position_embeddings": _M},
    {"max_position_embeddings": _M, "rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    {"max_position_embeddings": _M, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}},
    {"max_position_embeddings": _M, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    {
        "max_position_embeddings": _M,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
    },
    {
        "max_position_embeddings": _M,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 2048,
        },
    },
    {  # per-layer rope (Gemma-3 style)
        "max_position_embeddings": _M,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0},
            "sliding_attention": {"rope_type": "default"},
        },
    },
    {"_nested": True},
    {
        "_nested": True,
        "max_position_embeddings": _M,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    },
]
IDS = [None, [1, 5, 7], [2, 5, 7], [-1, 5, 7], [0, 5, 7], [1, 5, 9], [1, 5, 10], [2, 5, 10]]


@pytest.fixture(scope="module", params=list(HARNESS))
def answer(request, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fam")
    req = tmp / "request.json"
    req.write_text(
        json.dumps(
            {
                "families": True,
                "family_cases": {
                    "context": VARIANTS,
                    "aux": [{"n": N, "ids": i} for i in IDS],
                    # SGLang's own config classes (transformers maps no class to them)
                    "configs": {"KimiK25ForConditionalGeneration": KIMI_K25},
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "EAGLE3_"))}
    env.update(
        PYTHONPATH=STANDIN_DIR,  # the CPU harness's sgl_kernel stand-in, nothing of ours
        SGLANG_USE_CPU_ENGINE="1",
        TRITON_INTERPRET="1",
        HF_HUB_OFFLINE="1",
    )
    python = HARNESS[request.param] / "bin" / "python"
    proc = subprocess.run(
        [str(python), str(PROBE), str(req)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=tmp,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(TAG)]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    out = json.loads(lines[-1][len(TAG) :])
    assert out["version"] == request.param
    targets = [f["arch"] for f in out["families"]["targets"]]
    print(
        f"\nSGLang {out['version']}: {len(targets)} architectures define "
        f"set_eagle3_layers_to_capture ({out['seconds']} s): {', '.join(targets)}"
    )
    return out


def _dir(tmp: Path, name: str, cfg: dict) -> model_dirs.ModelDir:
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    md, found = model_dirs.load(name, "--x", str(d))
    assert md.config is not None, found
    return md


@functools.cache
def _targets(version: str, archs: tuple) -> list[str]:
    return [a for a in archs if not any(s in a for s in DRAFT_SIDE)]


@pytest.mark.harness  # the harness venvs
def test_families_are_enumerated_from_sglang(answer):
    targets = [f["arch"] for f in answer["families"]["targets"]]
    # the families the issue names, found by SGLang itself (none listed here by hand)
    assert {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"} <= set(targets)
    assert {"Glm4MoeForCausalLM", "MiniMaxM2ForCausalLM", "DeepseekV3ForCausalLM"} <= set(targets)
    assert len(targets) >= 40


@pytest.mark.harness  # the harness venvs
def test_every_family_context_agrees_with_sglang(answer, tmp_path):
    release = releases.BY_VERSION[answer["version"]]
    bad, compared, skipped = [], 0, 0
    for arch, entry in answer["family_cases"].items():
        for i, case in enumerate(entry["context"]):
            if "len" not in case:
                skipped += 1
                continue
            md = _dir(tmp_path, f"{arch}-{i}", case["config"])
            how = context_rule.loaded_as(md.config, md.text, release.rope_per_layer_types)
            if not how.mirrored:  # the dry-run verdict says it cannot predict this class
                skipped += 1
                continue
            ours = context_rule.derive(context_rule.sglang_text(md.config, md.text), how).value
            compared += 1
            if ours != case["len"]:
                bad.append(f"{arch} {case['config']}: rules {ours}, SGLang {case['len']}")
    print(
        f"\n{answer['version']}: {compared} family configs compared, {skipped} not loadable or not mirrored"
    )
    assert compared > 100
    assert bad == [], "\n".join(bad)


@pytest.mark.harness  # the harness venvs
def test_every_family_capture_agrees_with_sglang(answer, tmp_path):
    release = releases.BY_VERSION[answer["version"]]
    archs = tuple(answer["family_cases"])
    bad, ran, predicted, unresolved, honest = [], 0, 0, [], set()
    for arch in _targets(answer["version"], archs):
        entry = answer["family_cases"][arch]
        target = _dir(tmp_path, f"t-{arch}", {"architectures": [arch], "num_hidden_layers": N})
        for ids, sg in zip(IDS, entry["aux"], strict=True):
            if "unresolved" in sg or "missing" in sg:
                unresolved.append(arch)
                break
            eagle = {} if ids is None else {"eagle_aux_hidden_state_layer_ids": ids}
            draft = _dir(tmp_path, f"d-{arch}-{ids}", {**DRAFT, "eagle_config": eagle})
            found = {f.id: f for f in aux_layers.check(target, draft, release, set(), False, None)}
            where = f"{release.version} {arch} ids={ids}"
            if "aux.unpredictable" in found:  # the dry run says it cannot tell: honest
                honest.add(arch)
                continue
            refused = {"aux.embedding", "aux.out-of-range", "aux.duplicates"} & set(found)
            if "raised" in sg:  # SGLang's own method fails on these ids: must be refused
                if not refused:
                    bad.append(f"{where}: SGLang raises {sg['raised']}, rules accept")
                continue
            eff = found["aux.effective"].data["effective"]
            if eff != sg["layers_to_capture"]:
                bad.append(f"{where}: rules capture {eff}, SGLang {sg['layers_to_capture']}")
                continue
            b = sg.get("boundaries") or {}
            if (0 in eff and b.get("embedding") is None) or (N in eff and b.get("final") is None):
                predicted += 1  # the loop did not run on stand-ins: the table decides
                continue
            ran += 1
            allowed = set(range(1, N)) | ({0} if b.get("embedding") else set())
            allowed |= {N} if b.get("final") else set()
            sg_ok = set(eff) <= allowed and len(set(eff)) == len(eff)
            if sg_ok == bool(refused):
                bad.append(f"{where}: rules refuse {sorted(refused)}, SGLang ok={sg_ok} {b}")
    print(
        f"\n{answer['version']}: capture compared for {len(_targets(answer['version'], archs))} "
        f"target families; boundary behaviour run in {ran} cases, left to the release table in "
        f"{predicted}; unresolved: {sorted(set(unresolved))}; the dry run says it cannot "
        f"predict: {sorted(honest)}"
    )
    assert bad == [], "\n".join(bad)
