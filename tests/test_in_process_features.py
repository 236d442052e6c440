"""The in-process registry (in_sglang_base/registry.py): every feature that runs inside
SGLang's processes declares itself, and both entry points -- the launcher's server
(serve.py, scheduler_entry.py) and SGLang's plugin entry point (plugin.py) -- run the
same registry, each feature once per process, in order, only when switched on."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest

from sgl_eagle_ext.common import contract
from sgl_eagle_ext.in_sglang import features, plugin, scheduler_entry
from sgl_eagle_ext.in_sglang_base import registry
from sgl_eagle_ext.in_sglang_base.registry import (
    EXIT,
    LAUNCH,
    SCHEDULER,
    SERVER,
    Feature,
    Registry,
)

PACKAGE = Path(features.__file__).resolve().parents[1]

# name -> (stages, through the plugin too, the environment that switches it on)
EXPECTED = {
    contract.NCCL_TAG: ({SCHEDULER}, False, {}),
    contract.FAULT_ENV: ({SCHEDULER}, False, {contract.FAULT_ENV: "hang-scheduler"}),
    contract.CPU_ENV: ({SERVER, SCHEDULER}, False, {contract.CPU_ENV: "1"}),
    "v1 fixes": ({SCHEDULER}, False, {contract.CPU_ENV: "1"}),
    contract.PROFILE_ENV: ({SCHEDULER, LAUNCH, EXIT}, True, {contract.PROFILE_ENV: "1"}),
    contract.ADAPTIVE_BACKOFF_ENV: ({SCHEDULER}, True, {contract.ADAPTIVE_BACKOFF_ENV: "8"}),
    contract.SCHEDULE_FILE_ENV: ({SCHEDULER}, True, {contract.SCHEDULE_FILE_ENV: "/x.json"}),
    contract.CHAIN_VERIFY_ENV: ({SCHEDULER}, True, {contract.CHAIN_VERIFY_ENV: "1"}),
    contract.DRAFT_CATCHUP_ENV: ({SCHEDULER}, True, {contract.DRAFT_CATCHUP_ENV: "1"}),
}


def declaring_modules() -> set[str]:
    """Every module of the package that calls registry.register(...) (AST)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "in_sglang_base":
            continue  # the registry itself
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "registry"
            ):
                rel = path.relative_to(PACKAGE.parent).with_suffix("")
                found.add(".".join(rel.parts).removesuffix(".__init__"))
    return found


def test_every_declaration_is_imported_by_the_entry_points():
    source = ast.parse(Path(features.__file__).read_text())
    imported = set()
    for node in ast.walk(source):
        if isinstance(node, ast.ImportFrom):
            imported |= {f"{node.module}.{a.name}" for a in node.names}
    declared = declaring_modules()
    assert len(declared) == 9
    assert declared <= imported, f"not imported by in_sglang/features.py: {declared - imported}"


def test_the_registry_holds_each_feature_with_its_stages_switch_and_entry_points():
    got = {f.name: f for f in features.REGISTRY.features.values()}
    assert set(got) == set(EXPECTED)
    for name, (stages, through_plugin, env) in EXPECTED.items():
        feature = got[name]
        assert set(feature.hooks) == stages, name
        assert feature.plugin is through_plugin, name
        assert feature.enabled(env), name
        if env:  # the NCCL line is always on
            assert not feature.enabled({}), name
    order = [f.name for f in features.REGISTRY.ordered(SCHEDULER)]
    # the NCCL line before a hang; the CPU fixes before anything wraps SGLang's workers
    assert order.index(contract.NCCL_TAG) < order.index(contract.FAULT_ENV)
    assert order.index(contract.FAULT_ENV) < order.index(contract.CPU_ENV)
    assert order.index(contract.CPU_ENV) < order.index("v1 fixes")
    assert order.index("v1 fixes") < order.index(contract.PROFILE_ENV)
    # the kernel switches after the platform's stand-ins, before anything measures
    assert order.index(contract.CPU_ENV) < order.index(contract.CHAIN_VERIFY_ENV)
    assert order.index(contract.CHAIN_VERIFY_ENV) < order.index(contract.PROFILE_ENV)


def recording_registry(calls: list) -> Registry:
    def hook(name):
        return lambda ctx: calls.append((name, ctx.tp_rank, ctx.server_args))

    reg = Registry()
    reg.register(Feature("B", lambda env: "B" in env, {SCHEDULER: hook("B")}, order=50))
    reg.register(Feature("A", lambda env: "A" in env, {SCHEDULER: hook("A")}, order=60))
    reg.register(Feature("L", lambda env: True, {SCHEDULER: hook("L")}, order=0, plugin=False))
    reg.register(Feature("S", lambda env: True, {SERVER: hook("S")}))
    return reg


def test_run_goes_in_order_once_per_process_and_only_when_switched_on():
    calls = []
    reg = recording_registry(calls)
    assert reg.run(SCHEDULER, {"A": "1"}, tp_rank=3, server_args="sa") == ["L", "A"]
    assert calls == [("L", 3, "sa"), ("A", 3, "sa")]
    assert reg.run(SCHEDULER, {"A": "1", "B": "1"}) == ["B"]  # A and L ran already
    assert reg.run(SERVER, {}) == ["S"]
    with pytest.raises(ValueError):
        reg.run("somewhere")


def test_the_plugin_runs_only_plugin_features():
    calls = []
    reg = recording_registry(calls)
    assert reg.run(SCHEDULER, {"A": "1"}, via_plugin=True) == ["A"]
    assert reg.run(SCHEDULER, {"A": "1"}) == ["L"]  # the launcher's entry: the rest


def test_a_failing_hook_costs_only_its_feature(capsys):
    reg = Registry()

    def boom(ctx):
        raise RuntimeError("anchor moved")

    reg.register(Feature("BAD", lambda env: True, {SCHEDULER: boom}, order=1))
    reg.register(Feature("GOOD", lambda env: True, {SCHEDULER: lambda ctx: None}, order=2))
    assert reg.run(SCHEDULER, {}) == ["GOOD"]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "sgl_eagle_ext: BAD: scheduler hook failed (RuntimeError: anchor moved); serving without it"
    ]


def test_an_unknown_stage_is_refused_at_declaration():
    with pytest.raises(ValueError, match="unknown stage"):
        Feature("X", lambda env: True, {"schedular": lambda ctx: None})


@pytest.fixture
def recorded(monkeypatch):
    """The default registry, holding only recording features for the test."""
    calls = []
    monkeypatch.setattr(registry.REGISTRY, "features", recording_registry(calls).features)
    monkeypatch.setattr(registry.REGISTRY, "ran", set())
    monkeypatch.setenv("A", "1")
    return calls


def test_the_scheduler_entry_runs_the_registry_then_sglang(monkeypatch, recorded):
    handed_over = []
    fake = types.ModuleType("sglang.srt.managers.scheduler")
    fake.run_scheduler_process = lambda *a, **k: handed_over.append(a) or "sglang's"
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.scheduler", fake)
    args = ("server-args", "port-args", 0, 1)  # (server_args, port_args, gpu_id, tp_rank)
    assert scheduler_entry.run_scheduler_process(*args) == "sglang's"
    assert recorded == [("L", 1, "server-args"), ("A", 1, "server-args")]
    assert handed_over == [args]


def run_scheduler_process(server_args, port_args, gpu_id, tp_rank):
    """Named as SGLang's: the plugin acts only below it."""
    plugin.register()


def test_the_plugin_entry_point_runs_the_registry_in_a_scheduler_only(recorded):
    plugin.register()  # not below run_scheduler_process: the HTTP server, a detokenizer
    assert recorded == []
    run_scheduler_process("server-args", None, 0, 2)
    assert recorded == [("A", 2, "server-args")]  # L is the launcher's only
    run_scheduler_process("server-args", None, 0, 2)  # our entry ran it first: once
    assert recorded == [("A", 2, "server-args")]


SGLANG_LOADS_THE_PLUGIN = """
import json, os
from sglang.srt.plugins import load_plugins
from sgl_eagle_ext.in_sglang import adaptive_backoff
from sgl_eagle_ext.in_sglang_base import registry

def run_scheduler_process(server_args=None, port_args=None, gpu_id=0, tp_rank=0):
    load_plugins()  # where SGLang's own run_scheduler_process calls it (0.5.13+)

run_scheduler_process()
print(json.dumps({
    "ran": sorted(name for name, stage in registry.REGISTRY.ran),
    "backoff_installed": adaptive_backoff.PATCHES.installed,
}))
"""


@pytest.mark.harness
def test_sglangs_plugin_loader_runs_the_registry(tmp_path):
    """SGLang is the oracle: its own load_plugins() finds our entry point (pyproject's
    sglang.srt.plugins group) and, inside a scheduler, the registry's plugin features run
    as under the launcher: the probe backoff is really installed on SGLang's controller;
    the launcher-only ones (the NCCL line, the CPU harness) are not run."""
    import json
    import os
    import subprocess

    env = {
        **os.environ,
        "PYTHONPATH": str(PACKAGE.parent),
        contract.ADAPTIVE_BACKOFF_ENV: "8",
        contract.CPU_ENV: "1",  # switched on, yet launcher-only: not through the plugin
    }
    env.pop(contract.PROFILE_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", SGLANG_LOADS_THE_PLUGIN],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"ran": [contract.ADAPTIVE_BACKOFF_ENV], "backoff_installed": True}
    assert contract.NCCL_TAG not in proc.stdout
