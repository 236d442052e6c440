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


# The largest number any option takes: an integer a float holds exactly; beyond it a
# 400-digit value overflowed math and time calls into tracebacks.
MAX_INTEGER = 2**53
# Seconds: a timeout of 1e308 overflowed threading's waits; a month is far above any run.
MAX_SECONDS = 30 * 24 * 3600.0


def _bound(text: str, value, minimum, maximum, strict: bool):
    if value < minimum or (strict and value == minimum):
        words = {(0, True): "positive", (0, False): "zero or positive"}
        bound = words.get((minimum, strict), f"{'>' if strict else '>='} {minimum:g}")
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be {bound}")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: must be at most {maximum:.16g}")
    return value


def _shown(text: str) -> str:
    """The value as given, cut short (a 5000-digit number is not echoed whole)."""
    return repr(text if len(text) <= 40 else text[:20] + "..." + text[-8:])


def number(
    minimum: float = 0.0,
    *,
    strict: bool = False,
    maximum: float | None = None,
    infinity: bool = False,
):
    """An argparse `type`: a finite float >= minimum (> minimum if strict), <= maximum.
    NaN is refused (every comparison with NaN is false, so it would pass any later range
    check), and infinity unless `infinity` (an option that gives it a meaning). Every
    fractional option of every command parses here."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number") from None
        if math.isnan(value) or (math.isinf(value) and not (infinity and value > 0)):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: a finite number is needed")
        return _bound(text, value, minimum, maximum, strict)

    parse.__name__ = "number"
    return parse


def integer(minimum: int = 0, *, maximum: int = MAX_INTEGER):
    """An argparse `type`: a whole number in [minimum, maximum] (every integer option)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip()) if len(text) <= 40 else None
        except ValueError:
            value = None
        if value is None:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number")
        return _bound(text, value, minimum, maximum, False)

    parse.__name__ = "integer"
    return parse


def seconds(minimum: float = 0.0, *, strict: bool = False):
    """An argparse `type`: a duration in seconds (number(), at most MAX_SECONDS)."""
    return number(minimum, strict=strict, maximum=MAX_SECONDS)


def show_seconds(value: float) -> str:
    """A duration as people read it: 0.5 s stays 0.5 s (not "0 s"), 600 s is 600 s."""
    return f"{value:.0f} s" if value >= 10 else f"{value:.3g} s"


def port_number(text: str) -> int:
    """An argparse `type`: a TCP port, 1-65535."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value
