"""--fix: an overlay of a model directory with a corrected config.json.

Every entry of the original directory is symlinked into the overlay except
config.json, which is written anew; the original directory is never written to.
The overlay is rebuilt in a temporary directory and swapped in, so a reader never
sees half of one. OVERLAY_NOTE records where it came from and what changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

OVERLAY_NOTE = ".sgl-eagle-ext-overlay.json"


def default_root() -> Path:
    root = os.environ.get("EAGLE_EXT_CACHE", "~/.cache/sgl-eagle-ext")
    return Path(root).expanduser() / "overlays"


class Refused(OSError):
    """An overlay location that would write into the original directory."""


def write(original: Path, config: dict, changes: dict, root: Path | None = None) -> Path:
    """Write the overlay of `original` with `config` as its config.json; return its path.
    Parallel runs take turns (a lock on the overlays folder)."""
    original = Path(original).resolve()
    tag = hashlib.sha256(str(original).encode()).hexdigest()[:10]
    folder = Path(root or default_root()).expanduser().resolve()
    if folder.is_relative_to(original):
        raise Refused(
            f"the overlay folder {folder} is inside the model directory {original}, which "
            f"must never be written to; pass an --overlay-dir outside it"
        )
    dest = folder / f"{original.name}-{tag}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(dest.parent, os.O_RDONLY)  # the overlays folder itself is the lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _swap_in(original, config, changes, dest)
    finally:
        os.close(lock)  # releases the lock


def _swap_in(original: Path, config: dict, changes: dict, dest: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the server may run as another user
    try:
        for entry in original.iterdir():
            if entry.name not in ("config.json", OVERLAY_NOTE):
                (tmp / entry.name).symlink_to(entry)
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / OVERLAY_NOTE).write_text(
            json.dumps({"original": str(original), "changed": changes}, indent=2) + "\n"
        )
        if dest.exists() or dest.is_symlink():
            old = dest.with_name(f".{dest.name}-old-{os.getpid()}")
            dest.rename(old)
            tmp.rename(dest)
            shutil.rmtree(old, ignore_errors=True)  # symlinks only: their targets stay
        else:
            tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
