"""The layout's import rules, read from the source (AST, every import statement,
module level or inside a function, absolute or relative).

Floors: a module imports only from its own floor or the floors below it.

    0  common/                      the foundation (no SGLang, no torch)
    1  profiling/, in_sglang/, cpu/ code that runs inside SGLang's processes, the
                                    profile format and report, the CPU harness
    2  launcher/                    presets, the launch plan, preflight, start
    3  tools/                       bench, tune, router, patches, healthcheck, ...
    4  sgl_eagle_ext/*.py           the thin `python -m sgl_eagle_ext.X` entries

So the launcher never imports the tools, common never imports anything above it, and
in_sglang/ and profiling/recorder/ (every TP rank) never import the launcher or tools.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sgl_eagle_ext"
ROOT = "sgl_eagle_ext"
FLOORS: dict[str, int] = {
    "": 0,  # the package itself (sgl_eagle_ext/__init__.py: the version)
    "common": 0,
    "profiling": 1,
    "in_sglang": 1,
    "cpu": 1,
    "launcher": 2,
    "tools": 3,
}
ENTRIES = 4
FLOOR_NAMES = {0: "common", 1: "profiling/in_sglang/cpu", 2: "launcher", 3: "tools", 4: "entries"}


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


def _entries() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def floor_of_file(path: Path) -> int:
    parts = path.relative_to(PACKAGE).parts
    if len(parts) == 1:
        return FLOORS[""] if parts[0] == "__init__.py" else ENTRIES
    if parts[0] not in FLOORS:
        raise AssertionError(f"sgl_eagle_ext/{parts[0]}/ is on no floor: add it to FLOORS")
    return FLOORS[parts[0]]


def floor_of_module(module: str) -> int | None:
    """The floor of an `sgl_eagle_ext...` module; None for anything outside the package."""
    parts = module.split(".")
    if parts[0] != ROOT:
        return None
    if len(parts) == 1 or parts[1].startswith("__"):
        return FLOORS[""]
    if parts[1] in _entries():
        return ENTRIES
    return FLOORS.get(parts[1], FLOORS[""])  # a name the root package defines


def floor_violations() -> list[str]:
    """Every import in the package that goes up a floor."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mine = floor_of_file(path)
        for line, module in imported_modules(path):
            theirs = floor_of_module(module)
            if theirs is not None and theirs > mine:
                found.append(
                    f"{path.relative_to(PACKAGE)}:{line} imports {module} "
                    f"(floor {FLOOR_NAMES[mine]} < {FLOOR_NAMES[theirs]})"
                )
    return found


def test_imports_only_run_down_the_floors():
    assert floor_violations() == []


@pytest.mark.parametrize(
    "folder, forbidden",
    [
        ("in_sglang", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")),
        ("profiling/recorder", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")),
        ("launcher", ("sgl_eagle_ext.tools",)),
        ("common", ("sgl_eagle_ext.tools", "sgl_eagle_ext.launcher")),
    ],
    ids=["in_sglang", "recorder", "launcher-never-imports-tools", "common-never-imports-tools"],
)
def test_named_rules(folder, forbidden):
    assert violations(folder, forbidden) == []


def test_common_imports_no_sglang():
    assert violations("common", ("sglang", "sgl_kernel", "torch")) == []


def test_every_package_folder_is_on_a_floor():
    for sub in PACKAGE.iterdir():
        if sub.is_dir() and (sub / "__init__.py").is_file():
            assert sub.name in FLOORS, f"sgl_eagle_ext/{sub.name}/: add it to FLOORS"


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


def test_the_floor_check_catches_an_upward_import(tmp_path, monkeypatch):
    """A synthetic package with one upward import per floor: each one is reported
    (lazy and relative ones included), the downward ones are not."""
    root = tmp_path / "sgl_eagle_ext"
    files = {
        "__init__.py": "",
        "launch.py": "from sgl_eagle_ext.launcher import cli\n",  # entry -> launcher: fine
        "common/__init__.py": "",
        "common/releases.py": "def f():\n    from sgl_eagle_ext.tools.patches import manifest\n",
        "profiling/__init__.py": "from ..common import releases\n",  # down: fine
        "profiling/report.py": "from .. import launch\n",  # up to an entry
        "launcher/__init__.py": "",
        "launcher/runner.py": "from ..tools import wheels\n",
        "launcher/cli.py": "import sgl_eagle_ext.common.http\n",  # down: fine
        "tools/__init__.py": "",
        "tools/arms.py": "from sgl_eagle_ext.launcher import cli\n",  # down: fine
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", root)
    found = floor_violations()
    assert [f.split(" (")[0] for f in found] == [
        "common/releases.py:2 imports sgl_eagle_ext.tools.patches",
        "common/releases.py:2 imports sgl_eagle_ext.tools.patches.manifest",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools.wheels",
        "profiling/report.py:1 imports sgl_eagle_ext.launch",
    ]
    assert "(floor launcher < tools)" in found[2]
    assert violations("launcher", ("sgl_eagle_ext.tools",)) == [
        "launcher/runner.py:1 imports sgl_eagle_ext.tools",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools.wheels",
    ]
