"""The patching base (in_sglang_base/patching.py) every wrapper on SGLang goes through:
all anchors first, idempotent install, symmetric uninstall, one line and nothing
installed when one anchor is missing, no wrapper work during CUDA-graph capture.
On a small module of its own (the features' tests run it on SGLang's classes:
test_adaptive_backoff.py, test_profiling_unit.py, test_v1_worker_cpu.py)."""

from __future__ import annotations

import logging
import sys
import types

import pytest
import wrapt

from sgl_eagle_ext.in_sglang_base import patching

MOD = "sgl_eagle_ext_patching_target"


class Base:
    def inherited(self, x):
        return ("inherited", x)


@pytest.fixture
def target(monkeypatch):
    """A module with a function, a class (own, inherited, static and class methods)."""
    mod = types.ModuleType(MOD)

    class Worker(Base):
        def step(self, x):
            return ("step", x)

        @staticmethod
        def static(x):
            return ("static", x)

        @classmethod
        def klass(cls, x):
            return (cls.__name__, x)

    def func(x):
        return ("func", x)

    mod.Worker, mod.func = Worker, func
    monkeypatch.setitem(sys.modules, MOD, mod)
    return mod


def tagging(calls: list, tag: str):
    def wrapper(wrapped, instance, args, kwargs):
        calls.append(tag)
        return (tag, wrapped(*args, **kwargs))

    return wrapper


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_install_is_idempotent_and_uninstall_symmetric(target, caplog):
    caplog.set_level(logging.INFO, logger="sgl_eagle_ext.test_patching")
    w, originals = target.Worker, dict(vars(target.Worker))
    func = target.func
    calls = []
    p = patching.Patches("TEST", logger="sgl_eagle_ext.test_patching")
    patches = [
        patching.Wrap(f"{MOD}:Worker.step", tagging(calls, "s")),
        patching.Wrap(f"{MOD}:Worker.inherited", tagging(calls, "i")),
        patching.Wrap(f"{MOD}:Worker.static", tagging(calls, "st")),
        patching.Wrap(f"{MOD}:Worker.klass", tagging(calls, "k")),
        patching.Wrap(f"{MOD}:func", tagging(calls, "f")),
        patching.Set(f"{MOD}:added", 42, create=True),
    ]
    assert p.install(patches, on="on") and p.installed
    assert p.install(patches, on="on")  # again: nothing more wrapped, no second line
    assert lines(caplog) == ["TEST: on"]
    assert isinstance(vars(w)["step"], wrapt.FunctionWrapper)
    assert vars(w)["step"].__wrapped__ is originals["step"]
    assert w().step(1) == ("s", ("step", 1))  # one layer: wrapped once
    assert w().inherited(2) == ("i", ("inherited", 2))
    assert w.static(3) == ("st", ("static", 3)) and w().static(3) == ("st", ("static", 3))
    assert w.klass(4) == ("k", ("Worker", 4))
    assert target.func(5) == ("f", ("func", 5)) and target.added == 42
    assert calls == ["s", "i", "st", "st", "k", "f"]
    p.uninstall()
    assert not p.installed
    assert dict(vars(w)) == originals  # inherited: deleted again, not shadowed
    assert "inherited" not in vars(w) and w().inherited(2) == ("inherited", 2)
    assert target.func is func and not hasattr(target, "added")
    assert p.install(patches) and w().step(1) == ("s", ("step", 1))  # installs again
    p.uninstall()


def test_one_missing_anchor_installs_nothing_and_says_one_line(target, caplog):
    caplog.set_level(logging.INFO)
    originals, func = dict(vars(target.Worker)), target.func
    p = patching.Patches("TEST", logger="sgl_eagle_ext.test_patching", off="disabled, unpatched")
    ok = p.install(
        [
            patching.Wrap(f"{MOD}:func", tagging([], "f")),
            patching.Wrap(f"{MOD}:Worker.step", tagging([], "s")),
            patching.Wrap(f"{MOD}:Worker.renamed", tagging([], "r"), label="phase 'verify'"),
            patching.Wrap("sgl_eagle_ext_no_such_module:f", tagging([], "n")),
        ],
        release="0.5.99",
        on="on",
    )
    assert not ok and not p.installed
    assert dict(vars(target.Worker)) == originals and target.func is func
    (line,) = lines(caplog)
    assert line == (
        f"TEST: disabled, unpatched: SGLang 0.5.99: anchor {MOD}:Worker.renamed "
        f"(phase 'verify') not found: {MOD}:Worker.renamed does not exist"
    )
    p.uninstall()  # nothing to undo


def test_unknown_release_is_one_line(caplog):
    caplog.set_level(logging.INFO)
    p = patching.Patches("TEST", logger="sgl_eagle_ext.test_patching")
    assert p.release("0.5.22") is None
    (line,) = lines(caplog)
    assert line.startswith("TEST: disabled: SGLang 0.5.22") and "not a supported release" in line
    assert p.release("0.5.23").version == "0.5.23"


def test_uninstall_under_another_wrapper_leaves_it_working(target):
    first, second, calls = patching.Patches("A"), patching.Patches("B"), []
    assert first.install([patching.Wrap(f"{MOD}:Worker.step", tagging(calls, "a"))])
    assert second.install([patching.Wrap(f"{MOD}:Worker.step", tagging(calls, "b"))])
    first.uninstall()  # under B: stays in place, inert
    assert target.Worker().step(1) == ("b", ("step", 1)) and calls == ["b"]
    second.uninstall()
    assert target.Worker().step(1) == ("step", 1)


def test_no_wrapper_work_during_cuda_graph_capture(target, monkeypatch):
    capturing = [False]
    monkeypatch.setattr(patching, "_capture_check", lambda: lambda: capturing[0])
    observed, needed = [], []
    p = patching.Patches("TEST", say=lambda msg: None)
    assert p.install(
        [
            patching.Wrap(f"{MOD}:Worker.step", tagging(observed, "o")),
            patching.Wrap(f"{MOD}:func", tagging(needed, "n"), in_capture=True),
        ]
    )
    capturing[0] = True
    assert target.Worker().step(1) == ("step", 1) and observed == []  # straight through
    assert target.func(2) == ("n", ("func", 2)) and needed == ["n"]  # in_capture=True
    capturing[0] = False
    assert target.Worker().step(1) == ("o", ("step", 1))
    p.uninstall()
    said = []
    q = patching.Patches("TEST", say=said.append)
    capturing[0] = True
    assert not q.install([patching.Wrap(f"{MOD}:func", tagging([], "x"))])
    assert said == ["TEST: disabled: called during CUDA-graph capture; nothing wrapped"]
    assert not isinstance(vars(target)["func"], wrapt.FunctionWrapper)
