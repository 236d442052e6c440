"""Architectures a release's model registry knows, read from its source (no import).

SGLang's registry imports every module of sglang.srt.models and registers the
classes listed in its module-level `EntryClass`; the architecture name is the
class name. We collect those names with `ast`.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def _entry_names(file: Path) -> set[str]:
    try:
        tree = ast.parse(file.read_text(encoding="utf-8-sig"), str(file))
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in targets) and node.value:
            names.update(n.id for n in ast.walk(node.value) if isinstance(n, ast.Name))
    return names


def _registered(pkg: Path, pattern: str) -> frozenset[str]:
    names: set[str] = set()
    for file in sorted((Path(pkg) / "srt" / "models").glob(pattern)):
        names |= _entry_names(file)
    return frozenset(names)


@functools.cache
def architectures(pkg: Path) -> frozenset[str]:
    """Every registered architecture of the `sglang` package at pkg (every model file
    parsed: seconds, so only where SGLang's own loader did not answer)."""
    return _registered(pkg, "*.py")


@functools.cache
def draft_architectures(pkg: Path) -> frozenset[str]:
    """The EAGLE-3 draft architectures of the `sglang` package at pkg (its *eagle3* files)."""
    return _registered(pkg, "*eagle3*.py")


METHOD = "set_eagle3_layers_to_capture"


@functools.cache
def capturing(pkg: Path) -> frozenset[str]:
    """Classes of srt/models that define METHOD or inherit it from a class that does
    (base classes matched by name): the targets an EAGLE-3 startup accepts, for dry
    runs without that release installed (predicted; the installed one is asked)."""
    bases: dict[str, set[str]] = {}
    has: set[str] = set()
    for file in sorted((Path(pkg) / "srt" / "models").glob("*.py")):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8-sig"), str(file))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            names = {
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, (ast.Name, ast.Attribute))
            }
            bases.setdefault(node.name, set()).update(names)
            for item in node.body:
                defined = isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    item.name == METHOD
                )
                assigned = isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == METHOD for t in item.targets
                )
                if defined or assigned:
                    has.add(node.name)
    grew = True
    while grew:  # inherited through any chain of named bases
        grew = False
        for name, parents in bases.items():
            if name not in has and parents & has:
                has.add(name)
                grew = True
    return frozenset(has)
