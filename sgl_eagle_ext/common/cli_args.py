"""Small helpers for command lines that wrap SGLang's: `--` splitting and flag lookup."""

from __future__ import annotations


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and those after `--` (passed to SGLang untouched)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def last_value(args: list[str], flag: str) -> str | None:
    """The value argparse would keep for `--flag V` / `--flag=V` (last one wins)."""
    value = None
    for i, tok in enumerate(args):
        if tok == flag and i + 1 < len(args):
            value = args[i + 1]
        elif tok.startswith(flag + "="):
            value = tok.split("=", 1)[1]
    return value


def pop_flag(args: list[str], flag: str) -> tuple[list[str], str | None]:
    """`args` without `--flag V` / `--flag=V`, and the (last) value removed."""
    out, value, skip = [], None, False
    for i, tok in enumerate(args):
        if skip:
            skip = False
        elif tok == flag and i + 1 < len(args):
            value, skip = args[i + 1], True
        elif tok.startswith(flag + "="):
            value = tok.split("=", 1)[1]
        else:
            out.append(tok)
    return out, value
