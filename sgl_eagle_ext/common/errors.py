"""User errors: one clear message (what, where, how to fix), no traceback."""

from __future__ import annotations

import errno
import functools
import os
import sys

from sgl_eagle_ext.common import redaction

EXIT_USAGE = 2  # bad input: the same code argparse uses


class UserError(Exception):
    def __init__(self, message: str, fix: str | None = None, code: int = EXIT_USAGE):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.code = code

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
# Output that cannot be written: a full disk, a closed pipe, a quota, a dead terminal.
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EPIPE, errno.EDQUOT, errno.EFBIG, errno.EIO}


def _print_err(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _drop_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's own flush at exit would otherwise
    fail again and print `Exception ignored ... BrokenPipeError`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests)
        pass


def _std_streams() -> None:
    """A closed stdout/stderr (`cmd >&-`: Python sets sys.stdout to None) becomes
    /dev/null. The descriptor itself is reopened too: else the next file opened
    would take fd 1 and every print, and every child's output, would go into it."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            closed = False
        except OSError:
            closed = True
            try:
                devnull = os.open(os.devnull, os.O_RDWR)
                if devnull != fd:
                    os.dup2(devnull, fd)
                    os.close(devnull)
            except OSError:
                continue
        if closed or getattr(sys, name) is None:
            try:
                setattr(sys, name, open(fd, mode, encoding="utf-8", closefd=False))  # noqa: SIM115
            except OSError:
                pass


def _check_cwd() -> None:
    """A working directory removed under the shell: every relative path (and
    os.getcwd()) fails later, deep inside; refused here, once."""
    try:
        os.getcwd()
    except OSError as e:
        raise UserError(
            f"the working directory cannot be used ({e.strerror or e}: removed?).",
            fix="cd to an existing folder and run the command again",
        ) from None


def cli(prog: str):
    """Decorate a `main(argv) -> int` so a UserError becomes one message and an exit code;
    output that cannot be written (ENOSPC, EPIPE) one `error:` line and exit 1; Ctrl-C
    exit 130, without a traceback."""

    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            _std_streams()
            for stream in (sys.stdout, sys.stderr):  # a non-UTF-8 path printed: escaped
                if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
                    stream.reconfigure(errors="backslashreplace")
            try:
                _check_cwd()
                with redaction.masked_output():  # no known secret printed, in any form
                    code = main(argv)
                    sys.stdout.flush()  # a full disk behind `> file` shows here
                return code
            except UserError as e:
                _print_err(redaction.redact_text(f"{prog}: error: {e}", redaction.known()))
                return e.code
            except KeyboardInterrupt:
                _print_err(f"\n{prog}: interrupted")
                return EXIT_INTERRUPTED
            except OSError as e:
                if e.errno not in OUTPUT_ERRNOS:
                    raise
                _drop_stdout()
                where = f" {e.filename}" if e.filename else ""
                _print_err(f"{prog}: error: cannot write the output{where}: {e.strerror or e}")
                return EXIT_FAILED

        return run

    return wrap
