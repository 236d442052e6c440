"""One `patches apply|revert` command as one transaction over the SGLang tree.

Before the first byte of SGLang changes, a journal (<backup>/journal.json) names
the command's files and a copy of each (<backup>/.txn/) is saved; the journal
goes once every patch is through. A command killed at any point therefore leaves
either no journal (nothing changed, or everything done) or a journal that the
next apply or revert rolls back first: the saved copies are put back, so the tree
is exactly what it was before the interrupted command, and the rerun then does
its work whole. Every write is a temporary file renamed over the target.

Nothing is written through a symbolic link or outside the `sglang` package
directory: a linked backup folder would let apply write, and revert delete,
elsewhere. The backup folder and the journal are untrusted input: a journal naming
a path outside the tree or a patch id that is not one is refused, never acted on.
One command at a time per tree (an flock on the package directory, reentrant in
the process); a revert that was killed while dropping its backups is finished by
the next command ("committing" stage), not undone.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from sgl_eagle_ext.common import nesting, safe_files
from sgl_eagle_ext.common.errors import UserError

JOURNAL = "journal.json"
SAVED_CAP = 64 * safe_files.MIB  # one SGLang source file: far below
SAVED = ".txn"  # the command's files as they were before it
PATCH_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
OPS = ("apply", "revert")
STAGES = ("saving", "changing", "committing")
_held: dict[str, list] = {}  # package dir -> [lock fd, depth]


@contextmanager
def locked(pkg: Path):
    """Hold the tree's lock (parallel applies/reverts take turns, none loses a backup)."""
    key = str(pkg.resolve())
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held[key] = [fd, 1]
        yield
    finally:
        _held.pop(key, None)
        os.close(fd)  # releases the lock


def valid_rel(rel) -> bool:
    """A relative path inside the tree, as the manifest writes them."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or rel.startswith("/"):
        return False
    parts = PurePosixPath(rel).parts
    return bool(parts) and all(p not in ("..", ".", "") for p in parts)


def valid_id(pid) -> bool:
    return isinstance(pid, str) and bool(PATCH_ID.match(pid)) and ".." not in pid


def confined(pkg: Path, path: Path) -> Path:
    """`path` (under `pkg`) if no part of it below `pkg` is a symbolic link and it
    resolves inside `pkg`; else a UserError."""
    try:
        rel = path.relative_to(pkg)
    except ValueError:
        raise UserError(f"{path} is outside {pkg}; nothing was changed.", code=1) from None
    if not rel.parts:  # the package folder itself is no file to save or restore
        raise UserError(f"{path} is the SGLang package folder, not a file in it.", code=1)
    cur = pkg
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            raise UserError(
                f"{cur} is a symbolic link (to {os.readlink(cur)}); patches never write "
                f"through one (it could point outside the SGLang tree); nothing was changed.",
                fix=f"remove the link (rm {cur}) and rerun",
            )
    if not path.resolve().is_relative_to(pkg.resolve()):
        raise UserError(f"{path} resolves outside {pkg}; nothing was changed.")
    return path


def write_atomic(path: Path, data: bytes, like: Path | None = None) -> None:
    """`path` replaced by `data` in one rename (mode copied from `like`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if like is not None and like.exists():
            shutil.copymode(like, tmp)
        os.replace(tmp, path)
    except BaseException:  # no temp file left beside SGLang's (a folder in the way, ...)
        tmp.unlink(missing_ok=True)
        raise
    _sync_dir(path.parent)


def read_saved(path: Path) -> bytes:
    """A file of the tree or of the backup: a FIFO or device there never blocks."""
    return safe_files.read_bytes("", path, cap=SAVED_CAP)


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Transaction:
    """The journal of one command on one `sglang` package directory."""

    def __init__(self, pkg: Path, backup_dir: Path):
        self.pkg = pkg
        self.root = pkg.parent  # the diffs' paths are relative to it
        self.backup = backup_dir
        self.journal = backup_dir / JOURNAL
        self.saved = backup_dir / SAVED

    # -- the checks ------------------------------------------------------------
    def check_paths(self, files: list[str], patch_ids: list[str]) -> None:
        confined(self.pkg, self.backup)
        confined(self.pkg, self.saved)
        for rel in files:
            confined(self.pkg, self.root / rel)
            confined(self.pkg, self.saved / rel)
        for pid in patch_ids:
            confined(self.pkg, self.backup / pid)

    def pending(self) -> dict | None:
        """The interrupted command's journal, if there is one (checked: untrusted)."""
        if not (self.journal.exists() or self.journal.is_symlink()):
            return None
        confined(self.pkg, self.journal)  # a linked journal is refused, never read
        try:
            entry = nesting.json_loads(safe_files.read_text("", self.journal, cap=safe_files.MIB))
        except (UserError, ValueError, RecursionError):
            entry = None
        if entry is None:  # unreadable: no change had been journaled
            return {"op": "?", "stage": "saving", "files": [], "patches": []}
        why = _journal_problem(entry)
        if why:
            raise UserError(
                f"{self.journal}: not a journal this tool wrote ({why}); nothing was changed.",
                fix=f"check the SGLang tree in {self.pkg} (reinstall it if in doubt), then "
                f"remove {self.journal}",
                code=1,
            )
        for rel in entry["files"]:
            confined(self.pkg, self.root / rel)
        return entry

    # -- the life cycle --------------------------------------------------------
    def begin(self, op: str, files: list[str], patch_ids: list[str]) -> None:
        self.check_paths(files, patch_ids)
        entry = {"op": op, "stage": "saving", "files": files, "patches": patch_ids}
        shutil.rmtree(self.saved, ignore_errors=True)  # debris of a finished command
        write_atomic(self.journal, json.dumps(entry).encode())
        for rel in files:
            src = self.root / rel
            write_atomic(self.saved / rel, read_saved(src), like=src)
        entry["stage"] = "changing"  # from here on the SGLang tree may change
        write_atomic(self.journal, json.dumps(entry).encode())
        self._entry = entry

    def commit(self, drop_backups: list[str] = ()) -> None:
        if drop_backups:  # a kill while dropping them: the next command finishes the job
            entry = {**self._entry, "stage": "committing", "patches": list(drop_backups)}
            write_atomic(self.journal, json.dumps(entry).encode())
            self._drop(drop_backups)
        self.journal.unlink()
        _sync_dir(self.backup)
        self.tidy()

    def _drop(self, patch_ids) -> None:
        for pid in patch_ids:
            shutil.rmtree(confined(self.pkg, self.backup / pid), ignore_errors=True)

    def tidy(self) -> None:
        shutil.rmtree(self.saved, ignore_errors=True)
        if self.backup.is_dir() and not self.backup.is_symlink():
            for debris in self.backup.glob(f".{JOURNAL}.tmp-*"):  # a kill mid-write
                debris.unlink(missing_ok=True)
        if self.backup.is_dir() and not self.journal.exists():
            try:
                self.backup.rmdir()  # only when empty
            except OSError:
                pass

    def roll_back(self) -> str:
        """Put the tree back as it was before the journal's command. Idempotent: a
        rollback that is itself interrupted is redone by the next command."""
        entry = self.pending()
        if entry is None:
            self.tidy()
            return ""
        if entry["stage"] == "committing":  # done but for dropping the backups
            self._drop(entry["patches"])
            self.journal.unlink()
            self.tidy()
            return f"finished an interrupted `patches {entry['op']}` (its backups dropped)"
        try:
            if entry["stage"] == "changing":
                for rel in entry["files"]:
                    dest = confined(self.pkg, self.root / rel)
                    saved = confined(self.pkg, self.saved / rel)
                    write_atomic(dest, read_saved(saved), like=saved)
                    for debris in dest.parent.glob(f".{dest.name}.tmp-*"):
                        debris.unlink()
            if entry["op"] == "apply":
                self._drop(entry["patches"])
            self.journal.unlink()
        except (OSError, KeyError, TypeError, UserError) as e:
            raise UserError(
                f"rolling back an interrupted `patches {entry.get('op')}` in {self.pkg} "
                f"failed: {getattr(e, 'strerror', None) or e}. The files as they were "
                f"before it are in {self.saved}.",
                fix=f"copy them back over {self.root} by hand (or reinstall SGLang), then "
                f"remove {self.journal}",
                code=1,
            ) from None
        self.tidy()
        what = (
            "no SGLang file had changed"
            if entry["stage"] != "changing"
            else (f"{len(entry['files'])} file(s) restored")
        )
        return f"rolled back an interrupted `patches {entry['op']}` ({what})"


def _journal_problem(entry) -> str | None:
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("op") not in OPS or entry.get("stage") not in STAGES:
        return "unknown op or stage"
    files, ids = entry.get("files"), entry.get("patches")
    if not isinstance(files, list) or not all(valid_rel(f) for f in files):
        return "a file path that is absolute, leaves the tree or is not a string"
    if not isinstance(ids, list) or not all(valid_id(i) for i in ids):
        return "a patch id that is not one"
    return None
