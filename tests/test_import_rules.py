"""The layout's import rules, read from the source (AST, every import statement,
module level or inside a function, absolute or relative).

Floors: a module imports only from its own folder or the floors below it; an import
up a floor, or sideways into another folder of the same floor, fails.

    0  sgl_eagle_ext/__init__.py    the package (its version)
    1  common/                      the foundation (no SGLang, no torch)
    2  in_sglang_base/              the base of the code inside SGLang's processes: the
                                    patching base, the feature registry, the flush signal
    3  profiling/ | cpu/            the profile format, recorder and report | the CPU
                                    harness (its in-process fixes, install, tiny models)
    4  in_sglang/ | launcher/       SGLang's entry points and in-process features |
                                    presets, the launch plan, preflight, start
    5  tools/                       bench, tune, router, patches, healthcheck, ...
    6  sgl_eagle_ext/*.py           the thin `python -m sgl_eagle_ext.X` entries

So there is no loop between top-level folders; the launcher never imports the tools
nor in_sglang/ (it starts it by name: common/contract.SERVE_MODULE); common never
imports anything above it; and in_sglang/, in_sglang_base/ and profiling/recorder/
(every TP rank) never import the launcher or tools.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sgl_eagle_ext"
ROOT = "sgl_eagle_ext"
FLOORS: dict[str, int] = {
    "": 0,  # the package itself (sgl_eagle_ext/__init__.py: the version)
    "common": 1,
    "in_sglang_base": 2,
    "profiling": 3,
    "cpu": 3,
    "in_sglang": 4,
    "launcher": 4,
    "tools": 5,
}
ENTRIES = 6
FLOOR_NAMES = {
    0: "the package",
    1: "common",
    2: "in_sglang_base",
    3: "profiling/cpu",
    4: "in_sglang/launcher",
    5: "tools",
    6: "entries",
}


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


def unit_of_file(path: Path) -> tuple[int, str]:
    """(floor, unit): the unit is the top-level folder, or the entry module, or ""."""
    parts = path.relative_to(PACKAGE).parts
    if len(parts) == 1:
        return (FLOORS[""], "") if parts[0] == "__init__.py" else (ENTRIES, path.stem)
    if parts[0] not in FLOORS:
        raise AssertionError(f"sgl_eagle_ext/{parts[0]}/ is on no floor: add it to FLOORS")
    return FLOORS[parts[0]], parts[0]


def floor_of_file(path: Path) -> int:
    return unit_of_file(path)[0]


def unit_of_module(module: str) -> tuple[int, str] | None:
    """(floor, unit) of an `sgl_eagle_ext...` module; None for anything outside the package."""
    parts = module.split(".")
    if parts[0] != ROOT:
        return None
    if len(parts) == 1 or parts[1].startswith("__"):
        return FLOORS[""], ""
    if parts[1] in _entries():
        return ENTRIES, parts[1]
    if parts[1] in FLOORS:
        return FLOORS[parts[1]], parts[1]
    return FLOORS[""], ""  # a name the root package defines


def floor_of_module(module: str) -> int | None:
    unit = unit_of_module(module)
    return None if unit is None else unit[0]


def floor_violations() -> list[str]:
    """Every import in the package that goes up a floor or sideways into another folder
    (or entry) of the same floor."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mine, my_unit = unit_of_file(path)
        for line, module in imported_modules(path):
            theirs = unit_of_module(module)
            if theirs is None:
                continue
            floor, unit = theirs
            if floor > mine:
                why = f"floor {FLOOR_NAMES[mine]} < {FLOOR_NAMES[floor]}"
            elif floor == mine and unit != my_unit:
                why = f"sideways on floor {FLOOR_NAMES[mine]}: {my_unit or ROOT} -> {unit}"
            else:
                continue
            found.append(f"{path.relative_to(PACKAGE)}:{line} imports {module} ({why})")
    return found


def folder_graph() -> dict[str, set[str]]:
    """Top-level folder -> the top-level folders it imports (entries and the root left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:
            continue
        for _, module in imported_modules(path):
            unit = unit_of_module(module)
            if unit and unit[1] in FLOORS and unit[1] not in ("", parts[0]):
                graph.setdefault(parts[0], set()).add(unit[1])
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every folder that can reach itself, with one path back to it."""
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append([*path, start])
                    stack = []
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_imports_only_run_down_the_floors():
    assert floor_violations() == []


def test_no_loop_between_top_level_folders():
    graph = folder_graph()
    assert graph["profiling"] >= {"in_sglang_base"}  # the scan sees the real arrows
    assert loops(graph) == []


def test_the_loop_finder_finds_a_loop():
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c", "a"],
        ["b", "c", "a", "b"],
        ["c", "a", "b", "c"],
    ]
    assert loops({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


@pytest.mark.parametrize(
    "folder, forbidden",
    [
        ("in_sglang", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")),
        ("in_sglang_base", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")),
        ("profiling/recorder", ("sgl_eagle_ext.launcher", "sgl_eagle_ext.tools")),
        ("launcher", ("sgl_eagle_ext.tools", "sgl_eagle_ext.in_sglang")),
        ("common", ("sgl_eagle_ext.tools", "sgl_eagle_ext.launcher")),
    ],
    ids=[
        "in_sglang",
        "in_sglang_base",
        "recorder",
        "launcher-never-imports-tools-nor-in_sglang",
        "common-never-imports-tools",
    ],
)
def test_named_rules(folder, forbidden):
    assert violations(folder, forbidden) == []


def test_common_imports_no_sglang():
    assert violations("common", ("sglang", "sgl_kernel", "torch")) == []


def test_the_in_process_base_imports_no_torch():
    """in_sglang_base/ is imported in every SGLang process before SGLang itself (the CPU
    harness must run first): SGLang only lazily, where it is patched; never torch."""
    assert violations("in_sglang_base", ("torch", "sgl_kernel", "triton")) == []


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


def test_the_floor_check_catches_upward_and_sideways_imports(tmp_path, monkeypatch):
    """A synthetic package with upward and sideways imports (the two loops this layout
    had among them): each one is reported, lazy and relative ones included; the
    downward ones and those inside a folder are not."""
    root = tmp_path / "sgl_eagle_ext"
    files = {
        "__init__.py": "",
        "launch.py": "from sgl_eagle_ext.launcher import cli\n",  # entry -> launcher: fine
        "report.py": "from sgl_eagle_ext import launch\n",  # entry -> entry: sideways
        "common/__init__.py": "",
        "common/releases.py": "def f():\n    from sgl_eagle_ext.tools.patches import manifest\n",
        "in_sglang_base/__init__.py": "from sgl_eagle_ext.common import releases\n",  # down
        "profiling/__init__.py": "from ..common import releases\n",  # down: fine
        "profiling/report.py": "from .. import launch\n",  # up to an entry
        "profiling/instrument.py": "from sgl_eagle_ext.in_sglang import patching\n",  # up
        "cpu/__init__.py": "",
        "cpu/v1_fixes.py": "from ..in_sglang_base import patching\n",  # down: fine
        "cpu/harness.py": "def f():\n    from ..profiling import names\n",  # sideways
        "in_sglang/__init__.py": "",
        "in_sglang/injection.py": "from sgl_eagle_ext.cpu import harness\n",  # down: fine
        "in_sglang/serve.py": "from . import injection\n",  # inside the folder: fine
        "launcher/__init__.py": "",
        "launcher/runner.py": "from ..tools import wheels\n",
        "launcher/cli.py": "def f():\n    import sgl_eagle_ext.in_sglang.serve\n",  # sideways
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
        "cpu/harness.py:2 imports sgl_eagle_ext.profiling",
        "cpu/harness.py:2 imports sgl_eagle_ext.profiling.names",
        "launcher/cli.py:2 imports sgl_eagle_ext.in_sglang.serve",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools.wheels",
        "profiling/instrument.py:1 imports sgl_eagle_ext.in_sglang",
        "profiling/instrument.py:1 imports sgl_eagle_ext.in_sglang.patching",
        "profiling/report.py:1 imports sgl_eagle_ext.launch",
        "report.py:1 imports sgl_eagle_ext.launch",
    ]
    assert found[2].endswith("(sideways on floor profiling/cpu: cpu -> profiling)")
    assert found[5].endswith("(floor in_sglang/launcher < tools)")
    # the old loop (in_sglang -> cpu -> in_sglang, here through profiling) is found too
    assert ["cpu", "profiling", "in_sglang", "cpu"] in loops(folder_graph())
    assert violations("launcher", ("sgl_eagle_ext.tools",)) == [
        "launcher/runner.py:1 imports sgl_eagle_ext.tools",
        "launcher/runner.py:1 imports sgl_eagle_ext.tools.wheels",
    ]
