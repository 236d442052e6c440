"""The layout's import rules, read from the source (AST, every import statement,
module level or inside a function):

- in_sglang/ and profiling/recorder/ run inside SGLang's processes (every TP rank):
  they never import the launcher or the operator tools;
- common/ is the foundation everything imports: it imports no SGLang (nor torch).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sgl_eagle_ext"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this file's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return out


def violations(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        for line, module in imported_modules(path):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("folder", ["in_sglang", "profiling/recorder"])
def test_code_inside_sglang_never_imports_the_launcher_or_tools(folder):
    assert violations(folder, ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")) == []


def test_common_imports_no_sglang():
    assert violations("common", ("sglang", "sgl_kernel", "torch")) == []


def test_the_scan_sees_lazy_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "sgl_eagle_ext" / "in_sglang"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text(
        "def f():\n    from sgl_eagle_ext.launcher import cli\n"
        "from ..tools import router\n"
        "import sgl_eagle_ext.tools.bench\n"
    )
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "sgl_eagle_ext")
    found = violations("in_sglang", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools"))
    assert sorted(f.split(" imports ")[1] for f in found) == [
        "sgl_eagle_ext.launcher",
        "sgl_eagle_ext.launcher.cli",
        "sgl_eagle_ext.tools",
        "sgl_eagle_ext.tools.bench",
        "sgl_eagle_ext.tools.router",
    ]
