"""The phase table (profiling/phases.py) drives the recorder: every release's anchors
get exactly the table's wrappers, the wrappers take the table's marks under the
table's filter, and the profile's names are spelled in one module only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import wrapt

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.profiling import names, phases
from sgl_eagle_ext.profiling.recorder import instrument

PACKAGE = Path(__file__).resolve().parents[1] / "sgl_eagle_ext"


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_every_anchor_has_a_wrapper_and_every_wrapper_an_anchor(release):
    for worker in release.workers:
        roles = set(worker.anchors())
        expected = set(instrument.WRAPPERS) - (
            set() if worker.accept_join else {phases.ACCEPT_JOIN_ROLE}
        )
        assert roles == expected, (release.version, worker.worker)


def test_the_verify_question_is_answered_by_the_table():
    (v2,) = phases.where("verify_fwd", releases.BY_VERSION["0.5.23"])
    fwd = "sglang.srt.managers.tp_worker:TpModelWorker.forward_batch_generation with is_verify=True"
    assert v2 == f"v2: verify_fwd opens at call of {fwd}; closes at return from {fwd}"
    v1, _ = phases.where("accept", releases.BY_VERSION["0.5.10.post1"])
    assert v1.startswith(f"v1: accept opens at return from {releases.V1_WORKER.target_forward}")
    assert v1.endswith(
        "closes at return from sglang.srt.speculative.eagle_worker:EAGLEWorker.verify"
    )


class MarkRecorder:
    def __init__(self):
        self.marks: list[str] = []

    def mark(self, name):
        self.marks.append(name)


def wrapped_with(role: str):
    calls = []

    def method(*args, **kwargs):
        calls.append(kwargs)
        return "result"

    return wrapt.FunctionWrapper(method, instrument.WRAPPERS[role]), calls


@pytest.mark.parametrize("role", phases.MARKED_ROLES)
def test_wrappers_take_the_tables_marks(role, monkeypatch):
    rec = MarkRecorder()
    monkeypatch.setattr(instrument, "PROFILER", rec)
    fn, calls = wrapped_with(role)
    start, end, only_if = phases.marks_of(role)
    table = [
        m.name
        for m in sorted(
            {m for p in phases.PHASE_TABLE for m in (p.opens, p.closes) if m.role == role},
            key=lambda m: m.at != phases.CALL,
        )
    ]
    if only_if:
        assert fn(batch=1) == "result" and rec.marks == []  # the filter: not this call
        assert fn(batch=1, **{only_if: True}) == "result"
    else:
        assert fn(batch=1) == "result"
    assert rec.marks == table == [m for m in (start, end) if m]
    assert calls[-1]["batch"] == 1


def test_verify_forward_is_timed_only_for_is_verify_calls(monkeypatch):
    rec = MarkRecorder()
    monkeypatch.setattr(instrument, "PROFILER", rec)
    fn, _ = wrapped_with(phases.FWD_START.role)
    fn(is_verify=False)
    fn()
    assert rec.marks == []
    fn(is_verify=True)
    assert rec.marks == ["fwd_start", "fwd_end"]


def test_spans_follow_the_table():
    assert phases.PHASES == ("draft", "verify_fwd", "accept", "draft_extend")
    assert phases.SPANS["accept"] == ("fwd_end", "verify_end")
    assert phases.SPANS["cycle"] == ("step_start", "step_end")


def _string_constants(path: Path):
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            yield node.lineno, node.value


def test_profile_names_are_spelled_once():
    """The tag, the logger and every EAGLE3_PROFILE* variable appear as a string
    only in profiling/names.py; everything else imports them. The switch itself is
    spelled in common/contract.py (the launcher's stop reads it too, a floor below
    profiling), and names.py takes it from there."""
    name = re.compile(r"^(EAGLE3_PROFILE(_[A-Z_]+)?|sgl_eagle_ext\.profile)$")
    spelled = [
        f"{path.relative_to(PACKAGE)}:{line}: {value}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).as_posix() != "profiling/names.py"
        for line, value in _string_constants(path)
        if name.match(value)
        and not (
            path.relative_to(PACKAGE).as_posix() == "common/contract.py" and value == names.ENV
        )
    ]
    assert spelled == []
    assert [v for _, v in _string_constants(PACKAGE / "common" / "contract.py")].count(
        names.ENV
    ) == 1
    assert names.ENV == names.TAG  # the switch and the log tag are one word, as documented


def test_the_docstring_example_is_the_release_tables():
    """phases.py's example table (SGLang 0.5.23) stays what the release table says."""
    (worker,) = releases.BY_VERSION["0.5.23"].workers
    rows = [
        line.split()
        for line in phases.__doc__.splitlines()
        if line.startswith("    ") and line.split()[0] in worker.anchors()
    ]
    assert {r[0] for r in rows} == set(worker.anchors())
    for role, method, *_ in rows:
        assert getattr(worker, role).endswith(method), role
