"""Nesting depth of a JSON or TOML text, measured before the parser sees it.

Catching the parsers' RecursionError is not enough: at that depth any finalizer the
garbage collector runs (an unclosed socket's ResourceWarning, say) fails in turn, and
its traceback reaches stderr as an "unraisable exception". A text nested deeper than
any real file of ours (a preset is flat, a config.json a few levels) is refused first.
"""

from __future__ import annotations

import json
import re
import tomllib

LIMIT = 64  # far above real files, far below the parsers' recursion limit (~300 for TOML)

_JSON_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
# TOML: multi-line strings first, then one-line strings, then comments.
_TOML_SKIP = re.compile(
    r'"""(?:[^\\]|\\.)*?"""' r"|'''.*?'''" r'|"(?:[^"\\\n]|\\.)*"' r"|'[^'\n]*'" r"|#[^\n]*",
    re.S,
)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class TooDeep(ValueError):
    def __init__(self, depth: int):
        super().__init__(f"nested too deeply (more than {LIMIT} levels of brackets)")
        self.depth = depth


def depth(text: str, toml: bool = False) -> int:
    """The deepest bracket nesting outside strings (and TOML comments)."""
    brackets = _NOT_BRACKET.sub("", (_TOML_SKIP if toml else _JSON_STRINGS).sub("", text))
    level = deepest = 0
    for c in brackets:
        if c in "[{":
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def check(text: str, toml: bool = False) -> None:
    if text.count("[") + text.count("{") <= LIMIT:  # the usual case: cannot be too deep
        return
    d = depth(text, toml)
    if d > LIMIT:
        raise TooDeep(d)


def json_loads(text: str | bytes):
    """json.loads, refusing a too-deep text with TooDeep (a ValueError)."""
    check(text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray) else text)
    return json.loads(text)


def toml_loads(text: str) -> dict:
    """tomllib.loads, refusing a too-deep text with TooDeep (a ValueError; tomllib's
    own TOMLDecodeError is one too)."""
    check(text, toml=True)
    return tomllib.loads(text)
