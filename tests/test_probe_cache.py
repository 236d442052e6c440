"""Preflight's cache of SGLang's answers: a repeat is read from disk (no subprocess), any
changed input is asked again, a corrupt entry is asked again, and a hit gives exactly
the verdicts a fresh probe gives (the harness test asks the real SGLang 0.5.23).

The fast tests stand a small python script in for SGLang's python: it answers the
version query and, as the probe, derives the lengths from config.json and counts its
runs in a file, so a hit is proven by the count not moving.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import ask_sglang, probe_cache, run

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"  # the harness's SGLang 0.5.23
R = releases.BY_VERSION

FAKE = """#!{python}
import json, os, sys
if sys.argv[1] == "-c":  # the version query
    print("0.5.23")
    print(json.dumps({{"transformers": "5.0", "torch": "2.9", "src": "abc"}}))
    sys.exit(0)
with open({count!r}, "a") as f:
    f.write("probe\\n")
req = json.load(open(sys.argv[2]))
def length(d):
    return {{"len": json.load(open(os.path.join(d, "config.json")))["max_position_embeddings"]}}
ctx = []
for c in req["context"]:
    ctx.append({{"target_own": length(c["target"]), "target": length(c["target"]),
                "draft_own": length(c["draft"]), "draft": length(c["draft"])}})
print({tag!r} + json.dumps({{"version": "0.5.23", "pkg": "/x", "context": ctx,
                              "aux": [], "seconds": 1.0}}))
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(python, count()) with the cache in tmp_path."""
    monkeypatch.setenv("EAGLE_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(probe_cache.BYPASS, raising=False)
    count = tmp_path / "probe-runs"
    py = tmp_path / "python"
    py.write_text(FAKE.format(python=sys.executable, count=str(count), tag=ask_sglang.TAG))
    py.chmod(0o755)
    return str(py), lambda: len(count.read_text().splitlines()) if count.exists() else 0


def _dir(root: Path, name: str, length: int) -> str:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"max_position_embeddings": length}))
    (d / "generation_config.json").write_text("{}")
    return str(d)


def _ask(py, t, d, env=None):
    env = env or {}
    found = ask_sglang.installed(py, env)
    return ask_sglang.ask(py, t, d, None, None, env, found=found)


def test_a_repeat_is_read_from_the_cache_without_asking(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    fresh, why = _ask(py, t, d)
    assert why == "" and count() == 1 and fresh.cached_at is None
    hit, _ = _ask(py, t, d)
    assert count() == 1, "the second identical ask ran the probe"
    assert hit.cached_at and hit.label == f"by SGLang 0.5.23 (cached answer from {hit.cached_at})"
    assert (hit.version, hit.context, hit.aux) == (fresh.version, fresh.context, fresh.aux)
    assert len(list(probe_cache.folder().glob("*.json"))) == 1
    assert not list(probe_cache.folder().glob(".tmp-*"))  # the write was renamed into place


@pytest.mark.parametrize("name", ["config.json", "generation_config.json"])
def test_a_changed_config_byte_is_asked_again(fake, tmp_path, name):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    _ask(py, t, d)
    f = Path(d) / name
    f.write_text(f.read_text().replace("4096", "4097") if name == "config.json" else "{ }")
    again, _ = _ask(py, t, d)
    assert count() == 2 and again.cached_at is None
    if name == "config.json":
        assert again.context["draft_own"]["len"] == 4097  # not the stale answer
    _ask(py, t, d)
    assert count() == 2  # and the new answer is cached in turn


def test_other_inputs_are_part_of_the_key(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    _ask(py, t, d)
    _ask(py, t, d, {"SGLANG_SOMETHING": "1"})  # an environment variable SGLang may read
    assert count() == 2
    found = ask_sglang.installed(py, {})
    ask_sglang.ask(py, t, d, 4096, None, {}, found=found)  # another request
    assert count() == 3
    ask_sglang.ask(py, t, d, None, None, {}, found={**found, "transformers": "5.1"})
    assert count() == 4
    _ask(py, t, d, {"SGLANG_SOMETHING": "1"})
    assert count() == 4
    # what the probe never sees (it drops the context-check bypasses) or cannot matter
    _ask(py, t, d, {"SGLANG_SOMETHING": "1", "SGLANG_IS_IN_CI": "1", "NCCL_DEBUG": "INFO"})
    assert count() == 4


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"\xff\xfe", b'{"format": 1}', b"[]"])
def test_a_corrupt_entry_is_asked_again(fake, tmp_path, garbage):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    fresh, _ = _ask(py, t, d)
    (entry,) = probe_cache.folder().glob("*.json")
    entry.write_bytes(garbage)
    again, why = _ask(py, t, d)
    assert why == "" and count() == 2 and again.cached_at is None
    assert again.context == fresh.context
    hit, _ = _ask(py, t, d)  # rewritten whole
    assert count() == 2 and hit.cached_at


def test_the_bypass_asks_every_time_and_stores_nothing(fake, tmp_path, monkeypatch):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    _ask(py, t, d, {probe_cache.BYPASS: "0"})
    _ask(py, t, d, {probe_cache.BYPASS: "0"})
    assert count() == 2 and not probe_cache.folder().exists()
    monkeypatch.setenv(probe_cache.BYPASS, "0")
    _ask(py, t, d)
    assert count() == 3


def test_the_cache_holds_no_secret_and_no_unkeyable_answer(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    _ask(py, t, d, {"HF_TOKEN": "hf_s3cr3tvalue", "SGLANG_API_KEY": "sk-s3cr3t"})
    (entry,) = probe_cache.folder().glob("*.json")
    text = entry.read_text()
    assert "s3cr3t" not in text and "HF_TOKEN" not in text and t not in text
    # a python that answers only its version (no transformers version): never cached
    ask_sglang.ask(py, t, d, None, None, {}, found={"sglang": "0.5.23"})
    ask_sglang.ask(py, t, d, None, None, {}, found={"sglang": "0.5.23"})
    assert count() == 3


def test_preflight_says_the_verdicts_are_a_cached_answer(fake, tmp_path):
    py, count = fake
    t = tmp_path / "t"
    d = tmp_path / "d"
    for p, cfg in (
        (t, {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}),
        (d, {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}),
    ):
        p.mkdir()
        (p / "config.json").write_text(
            json.dumps({**cfg, "max_position_embeddings": 4096, "num_hidden_layers": 2})
        )
    first = run(str(t), str(d), R["0.5.23"], [], host_checks=False, sglang_python=py)
    second = run(str(t), str(d), R["0.5.23"], [], host_checks=False, sglang_python=py)
    assert count() == 1
    asked = next(f for f in second.findings if f.id == "sglang.asked")
    when = asked.data["cached_at"]
    assert when and f"cached answer from {when}" in asked.message
    assert next(f for f in first.findings if f.id == "sglang.asked").data["cached_at"] is None
    verdicts = {f.data["verdict"] for f in second.findings if f.id.startswith("context.")}
    assert verdicts == {f"by SGLang 0.5.23 (cached answer from {when})"}, second.render()


def _verdicts(report) -> list:
    """Every finding with the cache's note and the asking time taken off its wording."""
    out = []
    for f in report.findings:
        if f.id == "sglang.asked":
            continue
        note = f.data.get("verdict", "")
        plain = note.split(" (cached answer from")[0]
        data = {k: v for k, v in f.data.items() if k != "verdict"}
        message = re.sub(r"\(\d+\.\d s\)", "(s)", f.message.replace(note, plain))
        out.append((f.id, f.severity, message, plain, data))
    return out


@pytest.mark.harness  # asks the harness's SGLang 0.5.23
def test_a_hit_gives_exactly_sglangs_fresh_verdicts(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(probe_cache.BYPASS, raising=False)
    runs = []
    real = ask_sglang._probe
    monkeypatch.setattr(ask_sglang, "_probe", lambda *a: runs.append(1) or real(*a))
    t, d = tmp_path / "t", tmp_path / "d"
    small = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2}
    small |= {"num_key_value_heads": 1, "head_dim": 32, "vocab_size": 1000}
    t.mkdir()
    d.mkdir()  # a Qwen3 target without a length key (SGLang: 32768) and a 4096 draft
    (t / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "num_hidden_layers": 28,
                **small,
            }
        )
    )
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "num_hidden_layers": 1,
                "max_position_embeddings": 4096,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 13, 26]},
                **small,
            }
        )
    )

    def once():
        return run(str(t), str(d), R["0.5.23"], [], host_checks=False, sglang_python=str(PYTHON))

    fresh = once()
    hit = once()
    assert len(runs) == 1, "the identical second preflight asked SGLang again"
    assert next(f for f in hit.findings if f.id == "sglang.asked").data["cached_at"]
    assert _verdicts(hit) == _verdicts(fresh), hit.render()
    assert "context.draft-shorter" in {f.id for f in hit.findings}
    monkeypatch.setenv(probe_cache.BYPASS, "0")
    again = once()
    assert len(runs) == 2 and _verdicts(again) == _verdicts(fresh)


def test_the_probe_tag_is_defined_once_and_importing_the_probe_changes_nothing(monkeypatch):
    """ask_sglang reads the answer line's tag from the probe itself; importing the probe
    (for that) leaves the launcher's environment and sys.path alone."""
    import importlib
    import os

    from sgl_eagle_ext.launcher.preflight import sglang_probe

    monkeypatch.setenv("SGLANG_IS_IN_CI", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    path = list(sys.path)
    importlib.reload(sglang_probe)
    assert os.environ.get("SGLANG_IS_IN_CI") == "1" and "HF_HUB_OFFLINE" not in os.environ
    assert sys.path == path
    assert ask_sglang.TAG == sglang_probe.TAG
    sources = [
        ROOT / "sgl_eagle_ext/launcher/preflight" / f for f in ("ask_sglang.py", "sglang_probe.py")
    ]
    assert sum(s.read_text().count('TAG = "') for s in sources) == 1
