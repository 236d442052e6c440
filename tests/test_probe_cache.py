"""Preflight's cache of SGLang's answers: a repeat of a launch is read from disk (no
subprocess), any changed input (a config byte, an argument, the environment, the
working directory, the installed SGLang's files) is asked again, a corrupt entry is
asked again, a failed probe is kept as failed and says so, many launches are asked
in one subprocess and each stored alone, and a hit gives exactly the verdicts a fresh
probe gives (the harness test asks the real SGLang 0.5.23).

The fast tests stand a small python script in for SGLang's python: it answers the
installed-files query and, as the probe, derives the lengths from config.json and
counts its runs in a file, so a hit is proven by the count not moving.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.launcher.preflight import (
    ask_sglang,
    probe_cache,
    probe_server,
    run,
    settings_view,
)

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"  # the harness's SGLang 0.5.23
R = releases.BY_VERSION

FAKE = """#!{python}
import importlib.util, json, os, sys, time
if sys.argv[1] == "-c":  # the installed-files query
    print("0.5.23")
    print(json.dumps({{"transformers": "5.0", "torch": "2.9", "src": "abc"}}))
    sys.exit(0)
with open({count!r}, "a") as f:
    f.write("probe\\n")
with open({count!r} + ".requests", "a") as f:
    f.write(open(sys.argv[2]).read() + "\\n")
spec = importlib.util.spec_from_file_location("sglang_probe", sys.argv[1])
probe = importlib.util.module_from_spec(spec)  # the real probe's launch scope
spec.loader.exec_module(probe)
req = json.load(open(sys.argv[2]))
def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None
def length(d):
    if os.path.exists(os.path.join(d, "fail")):
        sys.exit("ImportError: no module named torch")
    if os.path.exists(os.path.join(d, "slow")):
        time.sleep(30)
    return {{"len": json.load(open(os.path.join(d, "config.json")))["max_position_embeddings"]}}
out = []
for case in req["launches"]:
  with probe.as_launched(case):
    t, d = flag(case["argv"], "--model-path"), flag(case["argv"], "--speculative-draft-model-path")
    ctx = {{"target_own": length(t), "target": length(t)}}
    if d:
        ctx.update(draft_own=length(d), draft=length(d))
    seen = {{"nccl": os.environ.get("NCCL_PROTO"), "leak": os.environ.get("SGLANG_LEAK"),
            "cwd": os.getcwd()}}
    os.environ["SGLANG_LEAK"] = "1"  # as SGLang's resolution sets variables of its own
    settings = {{"fields": {{"max_running_requests": 48, **seen}}, "attributed": True,
                "error": None,
                "changes": [["max_running_requests", None, 48, "_handle_eagle_family"]]}}
    out.append({{"context": ctx, "settings": settings, "errors": []}})
print({tag!r} + json.dumps({{"version": "0.5.23", "pkg": "/x", "launches": out, "seconds": 1.0}}))
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """(python, count()) with the cache in tmp_path."""
    monkeypatch.setenv("EAGLE_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(probe_cache.BYPASS, raising=False)
    # each run of the stand-in is counted: asked as a one-off subprocess, never warm
    monkeypatch.delenv(probe_server.VAR, raising=False)
    count = tmp_path / "probe-runs"
    py = tmp_path / "python"
    py.write_text(FAKE.format(python=sys.executable, count=str(count), tag=ask_sglang.TAG))
    py.chmod(0o755)
    return str(py), lambda: len(count.read_text().splitlines()) if count.exists() else 0


# The same stand-in, with the resolved fields holding the launch's --port as SGLang's do.
FAKE_PORT = FAKE.replace(
    '{{"max_running_requests": 48, **seen}}',
    '{{"max_running_requests": 48, **seen, "port": int(flag(case["argv"], "--port") or 30000)}}',
)
assert FAKE_PORT != FAKE


def _dir(root: Path, name: str, length: int) -> str:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"max_position_embeddings": length}))
    (d / "generation_config.json").write_text("{}")
    return str(d)


def _argv(t: str, d: str, *more: str) -> list[str]:
    return ["--model-path", t, "--speculative-draft-model-path", d, *more]


def _ask(py, t, d, env=None, *more, found=None):
    return ask_sglang.ask_launch(py, _argv(t, d, *more), env or {}, found=found)


def test_a_repeat_is_read_from_the_cache_without_asking(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    fresh, why = _ask(py, t, d)
    assert why == "" and count() == 1 and fresh.cached_at is None
    hit, _ = _ask(py, t, d)
    assert count() == 1, "the second identical ask ran the probe"
    assert hit.cached_at and hit.label == f"by SGLang 0.5.23 (cached answer from {hit.cached_at})"
    assert (hit.version, hit.context, hit.aux) == (fresh.version, fresh.context, fresh.aux)
    assert hit.settings.changes == fresh.settings.changes and hit.settings.cached_at
    assert len(list(probe_cache.folder().glob("*.json"))) == 1
    assert not list(probe_cache.folder().glob(".tmp-*"))  # the write was renamed into place


def test_another_port_is_a_hit_answered_with_its_own_port(fake, tmp_path):
    """The port is where the server listens, not an input of SGLang's resolution: a
    restart on another free port reads the entry, and the answer carries its own port."""
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    py_fields = FAKE_PORT.format(
        python=sys.executable, count=str(tmp_path / "runs"), tag=ask_sglang.TAG
    )
    fake_py = tmp_path / "python-port"
    fake_py.write_text(py_fields)
    fake_py.chmod(0o755)
    first, _ = _ask(str(fake_py), t, d, {}, "--port", "31001")
    assert first.settings.fields["port"] == 31001 and first.cached_at is None
    for spelling in (["--port", "31002"], ["--port=31003"]):
        hit, _ = _ask(str(fake_py), t, d, {}, *spelling)
        assert hit.cached_at, spelling  # read from the entry, SGLang not asked again
        assert hit.settings.fields["port"] == int(spelling[-1].rpartition("=")[2])
    assert len((tmp_path / "runs").read_text().splitlines()) == 1
    other, _ = _ask(str(fake_py), t, d, {}, "--port", "31004", "--context-length", "4096")
    assert other.cached_at is None  # any other argument still makes a new key


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


def test_other_inputs_are_part_of_the_key(fake, tmp_path, monkeypatch):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    _ask(py, t, d)
    _ask(py, t, d, {"SGLANG_SOMETHING": "1"})  # an environment variable SGLang may read
    assert count() == 2
    # the launch's own arguments SGLang reads
    _ask(py, t, d, {}, "--json-model-override-args", '{"max_position_embeddings": 2048}')
    _ask(py, t, d, {}, "--context-length", "4096")
    assert count() == 4
    found = ask_sglang.installed(py, {})
    _ask(py, t, d, found={**found, "transformers": "5.1"})
    _ask(py, t, d, found={**found, "src": "a patched file"})  # the installed files' signature
    assert count() == 6
    other = tmp_path / "elsewhere"  # a relative path means something else elsewhere
    other.mkdir()
    monkeypatch.chdir(other)
    _ask(py, t, d)
    assert count() == 7
    monkeypatch.chdir(tmp_path)
    _ask(py, t, d, {"SGLANG_SOMETHING": "1"})
    assert count() == 8  # (the working directory is tmp_path now, not where it was asked)
    _ask(py, t, d, {"SGLANG_SOMETHING": "1"})
    assert count() == 8
    # what the probe never sees (it drops the context-check bypasses) or cannot matter
    _ask(py, t, d, {"SGLANG_SOMETHING": "1", "SGLANG_IS_IN_CI": "1", "NCCL_DEBUG": "INFO"})
    assert count() == 8
    _ask(py, t, d, {"SGLANG_SOMETHING": "1", "CUDA_VISIBLE_DEVICES": "1"})  # other GPUs
    assert count() == 9


def test_the_distribution_signature_follows_any_installed_file(tmp_path):
    """The key signs every file of the installed sglang (RECORD, sizes, mtimes), not only
    srt/configs and srt/models: get_context_length lives in srt/utils/hf_transformers."""
    site = tmp_path / "site"
    pkg = site / "sglang" / "srt" / "utils" / "hf_transformers"
    pkg.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (pkg / "common.py").write_text("def get_context_length(c): return 2048\n")
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    (info / "RECORD").write_text("sglang/__init__.py,,\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    before = ask_sglang.installed(sys.executable, env)
    assert before["sglang"] == "0.5.23" and before["src"]
    (pkg / "common.py").write_text("def get_context_length(c): return 4096\n")
    after = ask_sglang.installed(sys.executable, env)
    assert after["src"] != before["src"]


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"\xff\xfe", b'{"format": 2}', b"[]"])
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


def test_a_failed_probe_is_cached_as_failed_and_says_so(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    (Path(d) / "fail").write_text("")
    none, why = _ask(py, t, d)
    assert none is None and count() == 1 and "ImportError: no module named torch" in why
    again, why = _ask(py, t, d)
    assert again is None and count() == 1, "the same failing launch was asked again"
    assert "ImportError: no module named torch" in why and "cached failure from" in why
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2}
    (Path(t) / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 8192}))
    for cached in (False, True):  # a new config: asked once, then read back as failed
        report = run(t, d, R["0.5.23"], [], host_checks=False, sglang_python=py)
        note = next(f for f in report.findings if f.id == "sglang.unavailable")
        assert ("cached failure from" in note.message) is cached and count() == 2
        assert "predicted from the release table" in note.message


def test_a_timeout_is_not_cached(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    (Path(d) / "slow").write_text("")
    for _ in range(2):
        none, why = ask_sglang.ask_launch(py, _argv(t, d), {}, timeout=1)
        assert none is None and "timed out" in why
    assert count() == 2  # the machine's load is no property of the launch


def test_many_launches_are_asked_in_one_subprocess_and_stored_each(fake, tmp_path, monkeypatch):
    """The arms of one comparison: their environments differ (in variables SGLang's
    answer does not depend on) and so may their working directories. One subprocess;
    each launch asked in its own environment and directory (what the one before set in
    the environment gone), no secret in the request file, each answer stored under its
    own launch's key: asking one alone later reads it from the cache."""
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    other = tmp_path / "other"
    other.mkdir()
    _dir(other, "t", 2048)  # what a relative "t" means there
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    launches = [
        ask_sglang.Launch(_argv(t, d), {}),
        ask_sglang.Launch(
            _argv(t, d, "--context-length", "4096"), {"NCCL_PROTO": "LL", "MY_API_KEY": "s3cr3t"}
        ),
        ask_sglang.Launch(_argv("t", d), {"NCCL_PROTO": "Simple"}, cwd=str(other)),
    ]
    got = ask_sglang.ask_launches(py, launches)
    assert count() == 1 and [a.context["target_own"]["len"] for a, _ in got] == [8192, 8192, 2048]
    seen = [{k: a.settings.fields[k] for k in ("nccl", "cwd", "leak")} for a, _ in got]
    assert seen == [
        {"nccl": None, "cwd": os.path.realpath(here), "leak": None},
        {"nccl": "LL", "cwd": os.path.realpath(here), "leak": None},
        {"nccl": "Simple", "cwd": os.path.realpath(other), "leak": None},
    ]
    assert "s3cr3t" not in Path(str(tmp_path / "probe-runs") + ".requests").read_text()
    for launch, (fresh, _) in zip(launches, got, strict=True):
        monkeypatch.chdir(launch.cwd or here)
        hit, _ = ask_sglang.ask_launch(py, launch.argv, launch.env)
        assert hit.cached_at and hit.context == fresh.context
    assert count() == 1
    monkeypatch.chdir(here)  # the relative launch, from here: no "t" here, asked (and failed)
    again, why = ask_sglang.ask_launch(py, _argv("t", d), {})
    assert again is None and "asking SGLang failed" in why and count() == 2


def test_launches_that_start_the_probe_differently_are_asked_apart(fake, tmp_path):
    """An SGLang variable may be read when SGLang's modules are imported, the CPU
    overlay's stand-in comes in through PYTHONPATH, torch reads the visible GPUs once:
    one subprocess per start environment, each launch still answered and cached."""
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    envs = [{}, {"NCCL_PROTO": "LL"}, {"SGLANG_ENABLE_SPEC_V2": "1"}, {"EAGLE_EXT_CPU": "1"}]
    envs.append({"CUDA_VISIBLE_DEVICES": "1"})
    launches = [ask_sglang.Launch(_argv(t, d), env) for env in envs]
    got = ask_sglang.ask_launches(py, launches)
    assert all(a is not None for a, _ in got) and count() == 4  # the first two share one
    assert [a.settings.fields["nccl"] for a, _ in got] == [None, "LL", None, None, None]
    again = ask_sglang.ask_launches(py, launches)
    assert all(a.cached_at for a, _ in again) and count() == 4


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
    _ask(py, t, d, found={"sglang": "0.5.23"})
    _ask(py, t, d, found={"sglang": "0.5.23"})
    assert count() == 3
    # a hub id for the model: what it resolves to is not keyed here
    assert (
        probe_cache.key(
            py, ask_sglang.installed(py, {}), ask_sglang.PROBE, ["--model-path", "org/model"], {}
        )
        is None
    )


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
    view = next(f for f in second.findings if f.id == "sglang.settings")
    assert "max_running_requests: unset -> 48, by `_handle_eagle_family`" in view.message


def test_the_dry_run_prints_what_sglang_sets_on_its_own(fake, tmp_path):
    py, count = fake
    t, d = _dir(tmp_path, "t", 8192), _dir(tmp_path, "d", 4096)
    shown = settings_view.lines(R["0.5.23"], _argv(t, d), {}, python=py)
    assert shown[0] == "# SGLang sets on its own (by SGLang 0.5.23):"
    assert "#   max_running_requests: unset -> 48, by `_handle_eagle_family`" in shown
    assert count() == 1
    # not the installed release, or no local model: nothing is asked, and it says why
    other = settings_view.lines(R["0.5.10.post1"], _argv(t, d), {}, python=py)
    hub = settings_view.lines(R["0.5.23"], _argv("org/model", d), {}, python=py)
    assert count() == 1 and all(line.startswith("#") for line in other + hub)
    assert "has SGLang 0.5.23, the launch is for 0.5.10.post1" in " ".join(other)
    assert "is not a local directory" in " ".join(hub)


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
    monkeypatch.setenv("EAGLE_EXT_CPU", "1")  # the CPU harness's launch environment
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
        t0 = time.monotonic()
        out = run(
            str(t),
            str(d),
            R["0.5.23"],
            ["--device", "cpu"],
            host_checks=False,
            sglang_python=str(PYTHON),
        )
        return out, time.monotonic() - t0

    fresh, cold = once()
    hit, warm = once()
    print(f"\npreflight with the probe: cold {cold:.1f} s, warm (cache hit) {warm:.2f} s")
    assert len(runs) == 1, "the identical second preflight asked SGLang again"
    assert next(f for f in hit.findings if f.id == "sglang.asked").data["cached_at"]
    assert _verdicts(hit) == _verdicts(fresh), hit.render()
    assert {"context.draft-shorter", "sglang.settings"} <= {f.id for f in hit.findings}


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


def test_the_probe_masks_secret_strings_and_keeps_numbers():
    """A field named like a secret is masked when it could hold one (a string, a list);
    a number or a flag is kept, so arms that differ in it are seen by the fairness check."""
    from sgl_eagle_ext.launcher.preflight import sglang_probe

    assert sglang_probe._masked("api_key", "sk-1") == "***"
    assert sglang_probe._masked("hf_token", "hf_x") == "***"
    assert sglang_probe._masked("ssl_keyfile_password", "pw") == "***"
    assert sglang_probe._masked("api_keys", ["a", "b"]) == "***"
    assert sglang_probe._masked("tbo_token_distribution_threshold", 0.48) == 0.48
    assert sglang_probe._masked("ds_heavy_token_num", 256) == 256
    assert sglang_probe._masked("enable_cache_key", True) is True
    assert sglang_probe._masked("api_key", None) is None
