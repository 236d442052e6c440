"""Typed options across module boundaries, read from the source (AST).

An argparse namespace stays in its command-line module: each tool's edge (its cli.py,
bench's commands/, the flags the launcher and preflight share in launch_flags.py, the
reader of declared flags in common/declared_flags.py) maps
it onto one frozen options object, and every other function takes that object or plain
values, so a renamed flag or a missing attribute fails where the namespace is mapped,
not deep inside a run. In bench's commands/, only the `read*` functions read it. A wrapper's positional `args` (wrapt's `(wrapped,
instance, args, kwargs)`, `*args`) is no namespace: only attribute use counts.
And benchmarks and the launcher start servers from the launch plan in process
(launcher/running.py), never through a `python -m sgl_eagle_ext.launch` child.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sgl_eagle_ext"
BENCH_COMMANDS = PACKAGE / "tools" / "bench" / "commands"
NAMESPACE = "args"
ATTRIBUTE_CALLS = ("getattr", "hasattr", "setattr", "delattr", "vars")
SCOPE = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])


def is_edge(path: Path) -> bool:
    """A command-line module: it parses the flags and maps them onto typed options."""
    # common/declared_flags.py: the one reader of a namespace into options whose fields
    # declare their flags (bench's groups, tune live)
    names = ("cli.py", "launch_flags.py", "declared_flags.py")
    return path.name in names or path.parent == BENCH_COMMANDS


def _reads_namespace(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == NAMESPACE
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
        first = node.args[0]
        return (
            node.func.id in ATTRIBUTE_CALLS
            and isinstance(first, ast.Name)
            and first.id == NAMESPACE
        )
    return False


def namespace_readers(source: str) -> list[tuple[str, int]]:
    """(function name, line) of each function that has a parameter `args` (not
    `*args`) and reads attributes of it, in its own body or a closure's."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        a = fn.args
        if not any(p.arg == NAMESPACE for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)):
            continue
        body = fn.body if isinstance(fn.body, list) else [fn.body]
        line = next(
            (n.lineno for stmt in body for n in ast.walk(stmt) if _reads_namespace(n)), None
        )
        if line is not None:
            out.append((getattr(fn, "name", "<lambda>"), line))
    return out


def test_the_check_tells_a_namespace_from_a_wrappers_args():
    source = """
def reads(args):
    return args.url

async def reads_by_name(console, args=None):
    return getattr(args, "quiet", False)

def in_a_closure(args):
    return lambda: args.seed

f = lambda args: vars(args)

def wrapper(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)

def varargs(*args):
    return args.count(1)

def first(args):
    return args[0]

def typed(opts):
    return opts.url
"""
    assert namespace_readers(source) == [
        ("reads", 3),
        ("reads_by_name", 6),
        ("in_a_closure", 9),
        ("<lambda>", 11),
    ]


def test_only_the_edge_reads_the_namespace():
    assert PACKAGE / "tools" / "tune" / "live.py" in SCOPE
    assert ROOT / "benchmarks" / "adaptive_vs_fixed.py" in SCOPE
    bad = [
        f"{path.relative_to(ROOT)}:{line} {name}(args) reads an argparse namespace"
        for path in SCOPE
        if not is_edge(path)
        for name, line in namespace_readers(path.read_text())
    ]
    assert not bad, (
        "map the namespace onto a typed options object in the command-line module and "
        "pass that (or plain values):\n" + "\n".join(bad)
    )


def test_each_bench_command_reads_its_flags_once():
    """In bench's commands/, only the `read*` functions read the namespace: the runs and
    reports take the command's typed options."""
    bad = [
        f"commands/{path.name}:{line} {name}"
        for path in sorted(BENCH_COMMANDS.glob("*.py"))
        for name, line in namespace_readers(path.read_text())
        if not name.lstrip("_").startswith("read")
    ]
    assert not bad, "read the flags in the command's read(args), then pass its options:\n" + (
        "\n".join(bad)
    )


def launcher_children(source: str) -> list[int]:
    """Lines of a list or tuple that spells `-m sgl_eagle_ext.launch`: a command that
    runs the launcher as a child."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if ("-m", "sgl_eagle_ext.launch") in zip(words, words[1:]):
                found.append(node.lineno)
    return found


def test_benchmarks_and_the_launcher_start_no_launcher_child():
    assert launcher_children('cmd = [sys.executable, "-m", "sgl_eagle_ext.launch", "--cpu"]')
    assert not launcher_children('cmd = [sys.executable, "-m", "sgl_eagle_ext.bench", "sweep"]')
    files = [*(ROOT / "benchmarks").rglob("*.py"), *(PACKAGE / "launcher").rglob("*.py")]
    found = [
        f"{p.relative_to(ROOT)}:{line}" for p in files for line in launcher_children(p.read_text())
    ]
    assert found == [], "start it from its plan: plan.build(...) then running.start(...)"
