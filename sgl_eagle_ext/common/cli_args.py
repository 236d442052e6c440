"""Small helpers for command lines that wrap SGLang's: `--` splitting, argparse types.
(Reading flags back out of an SGLang argument list: common/server_argv.py.)"""

from __future__ import annotations

import argparse
import math


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and those after `--` (passed to SGLang untouched)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


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
