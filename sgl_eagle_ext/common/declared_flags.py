"""A flag declared once: an options dataclass's field carries its command-line flag (names,
help, argparse kwargs, the check that reads its value), so one field is the flag, its
parsing and its typed value (bench's options, tune live's):

    max_tokens: int = flag("--max-tokens", type=int, check=above(0), help="...")
    file: Path = flag("FILE", check=as_path, help="...")  # a positional argument

`add_flags(parser, Options)` adds a dataclass's flags (help's `%(default)s` shows the
default; `defaults` overrides one per command, `required` makes one required);
`read_options(Options, args)` builds the frozen options from the parsed namespace, each
value through its check, so a bad value stops the command before anything starts. A
field without a flag reads its own options class (a group), else takes the namespace's
value of that name where there is one (bench's field_flags.py), else its default.
This is the edge every such command maps its namespace through
(tests/test_typed_options.py).
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable
from dataclasses import MISSING, field, fields, is_dataclass
from pathlib import Path


def flag(
    *names: str,
    help: str,
    default=None,
    cli_default=MISSING,
    check: Callable | None = None,
    opt_in: bool = False,
    **kw,
):
    """A dataclass field that is also a flag. cli_default: the parser's default where it
    is not the field's (a callable: computed when the parser is built, e.g. from the
    environment); opt_in: only on the commands that ask for it (add_flags `use`)."""
    meta = {"names": names, "help": help, "kw": kw, "check": check, "opt_in": opt_in}
    meta["cli_default"] = default if cli_default is MISSING else cli_default
    return field(default=default, metadata=meta)


def as_path(_flag: str, value) -> Path | None:
    """A check: the value as a Path (None when not given)."""
    return Path(value) if value else None


def as_paths(_flag: str, values) -> tuple[Path, ...]:
    """A check: a repeated flag's values as Paths."""
    return tuple(Path(v) for v in values or ())


def add_flags(
    p: argparse.ArgumentParser,
    cls,
    *,
    use: tuple[str, ...] = (),
    skip: tuple[str, ...] = (),
    defaults: dict | None = None,
    required: tuple[str, ...] = (),
    group: str | None = None,
) -> None:
    target = p.add_argument_group(group) if group else p
    for f in fields(cls):
        meta = f.metadata
        if "names" not in meta or f.name in skip or (meta["opt_in"] and f.name not in use):
            continue
        default = (defaults or {}).get(f.name, meta["cli_default"])
        default = default() if callable(default) else default
        kw = meta["kw"] | ({"required": True} if f.name in required else {})
        if not meta["names"][0].startswith("-"):  # a positional argument: its field's name
            target.add_argument(f.name, metavar=meta["names"][0], help=meta["help"], **kw)
            continue
        target.add_argument(*meta["names"], dest=f.name, default=default, help=meta["help"], **kw)


def read_options(cls, args: argparse.Namespace, **given):
    """`cls` from the namespace (its checks run in field order); `given` fields as given.
    A field that is itself an options class (a group of flags) is read the same way."""
    values = dict(given)
    types = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name in values:
            continue
        if "names" not in f.metadata and is_dataclass(types[f.name]):
            values[f.name] = read_options(types[f.name], args)
            continue
        if not hasattr(args, f.name):
            continue
        check = f.metadata.get("check")
        value = getattr(args, f.name)
        values[f.name] = check(f.metadata["names"][0], value) if check else value
    return cls(**values)
