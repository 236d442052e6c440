"""The issue's six cases: preflight's verdict by SGLang itself (the harness's 0.5.23 is
asked in a subprocess) and by the rules of a dry run, which must now agree with it.

Each case failed before the fix: the rules assumed 2048 for a target without a length
key, read a per-layer rope factor SGLang never reads, and refused ids -1 / 0 that the
release captures.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import run
from sgl_eagle_ext.launcher.preflight.cli import main as preflight_main

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


@pytest.mark.harness  # asks the harness's SGLang 0.5.23
@pytest.mark.parametrize("name, target, draft, length, version, error", CASES[:5])
def test_sglang_itself_gives_the_verdict(tmp_path, name, target, draft, length, version, error):
    t, d = _dir(tmp_path, "t", target), _dir(tmp_path, "d", draft)
    args = ["--context-length", length] if length else []
    report = run(t, d, R["0.5.23"], args, host_checks=False, sglang_python=str(PYTHON))
    assert _errors(report) & REFUSALS == ({error} if error else set()), report.render()
    asked = next(f for f in report.findings if f.id == "sglang.asked")
    assert asked.data["version"] == "0.5.23" and asked.data["seconds"] > 0
    verdicts = {f.data.get("verdict") for f in report.findings if "verdict" in f.data}
    assert verdicts == {"by SGLang 0.5.23"}, report.render()


@pytest.mark.harness  # asks the harness's SGLang 0.5.23
def test_preflight_prints_which_verdicts_came_from_sglang(tmp_path, capsys):
    t = _dir(tmp_path, "t", {**QWEN3, **SMALL})
    d = _dir(tmp_path, "d", {**DRAFT, "max_position_embeddings": 4096})
    rc = preflight_main(
        ["--model-path", t, "--draft-model-path", d, "--no-host", "--sglang-python", str(PYTHON)]
    )
    out = capsys.readouterr().out
    assert rc == 1
    assert "verdicts by SGLang 0.5.23 itself" in out
    line = next(ln for ln in out.splitlines() if "context.draft-shorter" in ln)
    assert "by SGLang 0.5.23" in line and "32768" in line
    rc = preflight_main(["--model-path", t, "--draft-model-path", d, "--no-host", "--rules-only"])
    assert "predicted from the release table" in capsys.readouterr().out


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
