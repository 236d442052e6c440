"""Output paths checked before anything starts: a log or results file that cannot
be written must be refused up front, not found out after an hour of work."""

from __future__ import annotations

import os
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError


def check_writable_file(
    flag: str,
    path: str | Path,
    inside: str | Path | None = None,
    *,
    inputs: tuple = (),
    suffixes: tuple[str, ...] = (),
) -> Path:
    """The one check of a path a tool writes: a regular file or absent (not a
    directory, FIFO, device or broken link), its nearest existing parent a folder it
    may write in, and, for a tool that owns a tree (`inside`), resolving inside it
    (no link or `..` leads out); never one of the command's `inputs` (it would be
    replaced); ending in one of `suffixes` where the format follows the name. Else a
    UserError naming the flag, the path and why. Creates nothing."""
    p = Path(path).expanduser()
    fix = f"give {flag} a file path in a folder you may write to"
    if "\x00" in str(path):
        raise UserError(f"{flag}: the path holds a NUL character.", fix=fix)
    try:
        for given in inputs:
            if given is not None and p.resolve() == Path(given).expanduser().resolve():
                raise UserError(
                    f"{flag} {path}: is an input of this command ({given}); writing it would "
                    "replace what is read.",
                    fix=f"give {flag} another path",
                )
        if inside is not None and not p.resolve().is_relative_to(Path(inside).resolve()):
            raise UserError(
                f"{flag} {path}: resolves outside {inside} (through a link or ..).",
                fix=f"give a path inside {inside}",
            )
        if str(path).endswith(os.sep) or p.is_dir():
            raise UserError(f"{flag} {path}: is a directory, not a file.", fix=fix)
        if suffixes and p.suffix.lower() not in suffixes:
            raise UserError(
                f"{flag} {path}: the format follows the name, and it does not end in "
                f"{' or '.join(suffixes)}.",
                fix=f"give {flag} a path ending in {suffixes[0]}",
            )
        if p.is_symlink() and not p.exists():  # written through, it would go nowhere known
            raise UserError(
                f"{flag} {path}: a broken link (to {os.readlink(p)}).", fix="remove it or fix it"
            )
        if p.exists():
            if not p.is_file():
                raise UserError(f"{flag} {path}: not a regular file.", fix=fix)
            if not os.access(p, os.W_OK):
                raise UserError(f"{flag} {path}: not writable (permission denied).", fix=fix)
            return p
        folder = p.parent
        while not folder.exists():  # the nearest existing ancestor must be a writable folder
            if folder.is_symlink():
                raise UserError(f"{flag} {path}: {folder} is a broken link.", fix=fix)
            folder = folder.parent
        if not folder.is_dir():
            raise UserError(f"{flag} {path}: {folder} is a file, not a folder.", fix=fix)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UserError(
                f"{flag} {path}: cannot be created under {folder} (permission denied).", fix=fix
            )
    except OSError as e:  # a name too long, a link loop, ...
        raise UserError(f"{flag} {path}: unusable: {e.strerror or e}.", fix=fix) from None
    return p


def read_secret_file(flag: str, path: str | None) -> str | None:
    """The one-line secret held by the file at `path` (None when no path is given)."""
    if not path:
        return None
    from sgl_eagle_ext.common import safe_files

    key = safe_files.read_text(flag, path, cap=safe_files.SECRET_CAP).strip()
    if not key or "\n" in key:
        raise UserError(f"{flag} {path}: must hold the key on one line.", fix="write the key alone")
    return key


def write_text(
    flag: str,
    path: str | Path,
    text: str | bytes,
    inside: str | Path | None = None,
    errors: str = "strict",
) -> Path:
    """`text` (or bytes) written to `path` (checked first; `inside`: the tree the tool
    owns) in one rename: a reader never sees half a file, and a link at `path` is
    replaced, never written through."""
    p = check_writable_file(flag, path, inside)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    try:
        if isinstance(text, bytes):
            with open(tmp, "xb") as f:
                f.write(text)
        else:
            with open(tmp, "x", encoding="utf-8", errors=errors) as f:
                f.write(text)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def make_folder(flag: str, path: str | Path) -> Path:
    """`path` as a folder, created with its parents if missing; one UserError when it
    cannot be (a file in the way, no permission) or its name is not UTF-8 (libraries
    that write model files encode their paths as UTF-8 and would fail half-way)."""
    p = Path(path).expanduser()
    fix = f"give {flag} a folder you may write to"
    try:
        str(p).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{flag} {path}: the name is not UTF-8.", fix=fix) from None
    try:
        p.mkdir(parents=True, exist_ok=True)
        if not os.access(p, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot be created ({e.strerror or e}).", fix=fix) from None
    return p
