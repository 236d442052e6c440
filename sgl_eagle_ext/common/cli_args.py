"""Small helpers for command lines that wrap SGLang's: `--` splitting and flag lookup."""

from __future__ import annotations

import argparse
import math


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


def number(minimum: float = 0.0, *, strict: bool = False):
    """An argparse `type`: a finite float >= minimum (> minimum if strict). NaN and
    infinities are refused: every comparison with NaN is false, so it would pass
    any later range check."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r}: a finite number is needed")
        if value < minimum or (strict and value == minimum):
            words = {(0, True): "positive", (0, False): "zero or positive"}
            bound = words.get((minimum, strict), f"{'>' if strict else '>='} {minimum:g}")
            raise argparse.ArgumentTypeError(f"{text!r}: must be {bound}")
        return value

    parse.__name__ = "number"
    return parse


def port_number(text: str) -> int:
    """An argparse `type`: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value
