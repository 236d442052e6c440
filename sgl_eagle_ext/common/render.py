"""One renderer for what a tool prints but did not write itself (a model path, a preset
value, a server's answer): it can neither forge a line nor drive the terminal.

    render.line("org/m\ntouch X #")   -> 'org/m\\ntouch X #'   (one line, escapes shown)
    render.shell_word("org/m\nX")     -> $'org/m\\nX'          (one shell word, one line)
    render.command(["python", ...])   -> the words joined: `launch --dry-run | sh` safe
    render.terminal(text)             -> text with ESC and other controls shown as \\x1b

A newline in a model path put `touch X # ...` on a line of its own in the dry run's
`#` comments (`launch --dry-run | sh` ran it); a newline in a preset value forged an
`unequal:` line of the fairness report; ANSI escapes in a value reached the terminal.
`terminal` runs on everything the command-line tools print (errors.cli's stream)."""

from __future__ import annotations

import re
import shlex

# Controls that move the cursor, clear or recolour the screen, or end a line: C0 but
# tab and newline (carriage return: `line` only: tqdm redraws its bar with it), DEL, C1.
_TERMINAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def terminal(text: str) -> str:
    """`text` with every control that could drive a terminal (ESC first) shown escaped;
    newlines, tabs and carriage returns kept."""
    return _TERMINAL.sub(_escape, text) if _TERMINAL.search(text) else text


def line(value) -> str:
    """`value` as text on one line: line breaks and every other control escaped."""
    text = value if isinstance(value, str) else str(value)
    return _LINE.sub(_escape, text) if _LINE.search(text) else text


def shell_word(value: str) -> str:
    """One shell word on one line: shlex.quote, or bash's $'...' where the value holds a
    control character (a quoted newline would still break the printed line)."""
    if not _LINE.search(value):
        return shlex.quote(value)
    body = "".join(
        "\\\\" if c == "\\" else "\\'" if c == "'" else line(c) if _LINE.match(c) else c
        for c in value
    )
    return f"$'{body}'"


def command(args) -> str:
    """A command line to print (and to paste into a shell)."""
    return " ".join(shell_word(str(a)) for a in args)
