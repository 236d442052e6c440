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
elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError

JOURNAL = "journal.json"
SAVED = ".txn"  # the command's files as they were before it


def confined(pkg: Path, path: Path) -> Path:
    """`path` (under `pkg`) if no part of it below `pkg` is a symbolic link and it
    resolves inside `pkg`; else a UserError."""
    rel = path.relative_to(pkg)
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
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if like is not None and like.exists():
        shutil.copymode(like, tmp)
    os.replace(tmp, path)
    _sync_dir(path.parent)


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
        for rel in files:
            confined(self.pkg, self.root / rel)
        for pid in patch_ids:
            confined(self.pkg, self.backup / pid)

    def pending(self) -> dict | None:
        """The interrupted command's journal, if there is one."""
        if not self.journal.is_file():
            return None
        try:
            return json.loads(self.journal.read_text())
        except (OSError, ValueError):
            return {"op": "?", "stage": "saving", "files": [], "patches": []}

    # -- the life cycle --------------------------------------------------------
    def begin(self, op: str, files: list[str], patch_ids: list[str]) -> None:
        entry = {"op": op, "stage": "saving", "files": files, "patches": patch_ids}
        shutil.rmtree(self.saved, ignore_errors=True)  # debris of a finished command
        write_atomic(self.journal, json.dumps(entry).encode())
        for rel in files:
            src = self.root / rel
            write_atomic(self.saved / rel, src.read_bytes(), like=src)
        entry["stage"] = "changing"  # from here on the SGLang tree may change
        write_atomic(self.journal, json.dumps(entry).encode())

    def commit(self, drop_backups: list[str] = ()) -> None:
        self.journal.unlink()
        _sync_dir(self.backup)
        for pid in drop_backups:
            shutil.rmtree(self.backup / pid, ignore_errors=True)
        self.tidy()

    def tidy(self) -> None:
        shutil.rmtree(self.saved, ignore_errors=True)
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
        try:
            if entry["stage"] == "changing":
                for rel in entry["files"]:
                    dest = confined(self.pkg, self.root / rel)
                    saved = self.saved / rel
                    write_atomic(dest, saved.read_bytes(), like=saved)
                    for debris in dest.parent.glob(f".{dest.name}.tmp-*"):
                        debris.unlink()
            for pid in entry["patches"] if entry["op"] == "apply" else ():
                shutil.rmtree(self.backup / pid, ignore_errors=True)
            self.journal.unlink()
        except (OSError, KeyError, TypeError) as e:
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
