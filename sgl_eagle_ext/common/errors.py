"""User errors: one clear message (what, where, how to fix), no traceback."""

from __future__ import annotations

import functools
import sys

EXIT_USAGE = 2  # bad input: the same code argparse uses


class UserError(Exception):
    def __init__(self, message: str, fix: str | None = None, code: int = EXIT_USAGE):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


def cli(prog: str):
    """Decorate a `main(argv) -> int` so a UserError becomes one message and an exit code."""

    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            try:
                return main(argv)
            except UserError as e:
                print(f"{prog}: error: {e}", file=sys.stderr)
                return e.code

        return run

    return wrap
