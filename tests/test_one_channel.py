"""One channel to SGLang (issue 35): every question to an installed SGLang goes through
the preflight's probe (launcher/preflight/sglang_probe.py + ask_sglang.py), tune live's
table loader included; one installed_version."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from sgl_eagle_ext.common import installed, releases
from sgl_eagle_ext.launcher.preflight import ask_sglang

PACKAGE = Path(releases.__file__).resolve().parents[1]
PROBE = PACKAGE / "launcher" / "preflight" / "sglang_probe.py"


def sglang_code_strings(source: str) -> list[int]:
    """Lines of string constants that are code importing SGLang (a `python -c` body)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if any(f"{w} sglang" in text for w in ("import", "from")) and "\n" in text:
                out.append(node.lineno)
    return out


def test_the_scan_finds_a_loader_string():
    """tune live's former loader: a `python -c` body importing SGLang."""
    loader = 'X = (\n    "import json, sys\\n"\n    "from sglang.srt import x\\n"\n)\n'
    assert sglang_code_strings(loader) == [2]
    assert sglang_code_strings('"""Imports sglang lazily."""') == []  # prose, one line


def test_no_code_string_imports_sglang_outside_the_probe():
    found = [
        f"{p.relative_to(PACKAGE)}:{line}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != PROBE
        for line in sglang_code_strings(p.read_text(encoding="utf-8"))
    ]
    assert not found, "ask SGLang through the probe (ask_sglang.py): " + ", ".join(found)


def test_one_installed_version():
    defs = [
        p.relative_to(PACKAGE)
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == "installed_version"
    ]
    assert defs == [Path("common/installed.py")]
    assert releases.installed_version is installed.installed_version


@pytest.mark.harness
def test_installed_version_in_process_and_of_a_python():
    own = installed.installed_version()
    assert own == releases.PRIMARY.version  # the harness runs the primary release
    assert installed.installed_version(sys.executable, None) == own
    assert installed.installed_version("/nonexistent/python") is None


@pytest.mark.harness
def test_sglangs_loader_answers_through_the_probe(tmp_path):
    """The buckets SGLang's own AdaptiveSpeculativeParams builds, and its refusal in
    its own words, asked through the probe."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0]}}))
    assert ask_sglang.adaptive_buckets(sys.executable, good, 1) == (
        {"1": [1, 3], "8": [0]},
        "",
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [-1]}}))
    buckets, why = ask_sglang.adaptive_buckets(sys.executable, bad, 1)
    assert buckets is None
    assert why.startswith("ValueError: BS 1: candidate_steps must be a list of non-negative")
