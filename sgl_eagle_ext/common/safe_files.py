"""Every file a tool reads is opened here: refused at once, with one line, when it
is not a regular file (a FIFO blocks the reader forever, /dev/zero never ends, a
socket cannot be read), and capped in size where it is read whole. The check is
made on the open descriptor (O_NONBLOCK: opening a FIFO does not wait for a
writer), so a file swapped in between cannot slip past it."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError

MIB = 1 << 20
# Whole-file caps: a preset, a model's config.json or an adaptive table is a few KB;
# a secret a line. Far above any real file, far below what would hurt the host.
CONFIG_CAP = 16 * MIB
SECRET_CAP = 64 * 1024
DATA_CAP = 1024 * MIB  # prompt/dataset files read whole


def kind_of(mode: int) -> str:
    for test, word in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISREG, "a file"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def _refuse(flag: str, path, why: str, fix: str | None = None) -> UserError:
    where = f"{flag} {path}" if flag else str(path)
    return UserError(f"{where}: {why}.", fix=fix or "give a regular file")


def open_regular(
    flag: str,
    path: str | Path,
    text: bool = False,
    errors: str = "strict",
    missing_raises: bool = False,
):
    """`path` opened for reading, if it is a regular file; else one UserError.
    `text`: a UTF-8 text stream (`errors` as for open()). `missing_raises`: a missing
    file raises FileNotFoundError (for callers with their own words for it)."""
    p = Path(path).expanduser()
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_raises:
            raise
        raise _refuse(flag, path, "no such file", "check the path") from None
    except OSError as e:
        raise _refuse(flag, path, f"cannot be read ({e.strerror or e})", "check the path") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(flag, path, kind_of(mode) + ", not a regular file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    if text:
        return open(fd, encoding="utf-8", errors=errors)
    return open(fd, "rb")


def read_bytes(flag: str, path: str | Path, cap: int = CONFIG_CAP, **how) -> bytes:
    with open_regular(flag, path, **how) as f:
        try:
            data = f.read(cap + 1)
        except OSError as e:
            raise _refuse(flag, path, f"cannot be read ({e.strerror or e})") from None
    if len(data) > cap:
        raise _refuse(
            flag, path, f"larger than {cap // 1024} KiB; not the file meant", "check the path"
        )
    return data


def read_text(flag: str, path: str | Path, cap: int = CONFIG_CAP, **how) -> str:
    """The whole file as UTF-8 text (at most `cap` bytes; NUL refused: binary)."""
    data = read_bytes(flag, path, cap, **how)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _refuse(flag, path, f"not UTF-8 text (byte {e.start})", "give a text file") from None
    if "\x00" in text:
        raise _refuse(flag, path, "holds NUL bytes (a binary file?)", "give a text file")
    return text


def check_regular(flag: str, path: str | Path) -> Path:
    """`path` exists and is a regular file (links followed); else one UserError."""
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode
    except OSError as e:
        raise _refuse(flag, path, f"cannot be read ({e.strerror or e})", "check the path") from None
    if not stat.S_ISREG(mode):
        raise _refuse(flag, path, kind_of(mode) + ", not a regular file")
    return p


def check_folder(flag: str, path: str | Path, must_exist: bool = False) -> Path:
    """`path` is a folder, or (unless `must_exist`) does not exist yet: a file, a FIFO
    or a device where a folder is expected is refused."""
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        if must_exist:
            raise _refuse(flag, path, "no such folder", "check the path") from None
        return p
    except OSError as e:
        raise _refuse(flag, path, f"unusable ({e.strerror or e})", "check the path") from None
    if not stat.S_ISDIR(mode):
        raise _refuse(flag, path, kind_of(mode) + ", not a folder", "give a folder")
    return p
