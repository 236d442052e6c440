"""Source patches for SGLang releases (patches/manifest.toml): state, apply, revert.

A patch's state in an `sglang` package directory is one of
  applied      its reverse applies cleanly (the fixed code is there);
  applicable   it applies cleanly (the pristine code is there);
  conflicting  neither: the files differ from both (another version, local edits).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools import wheels
from sgl_eagle_ext.tools.patches import gnu_patch
from sgl_eagle_ext.tools.patches.manifest import Patch, for_release, load

__all__ = ["Patch", "Target", "load", "for_release", "target", "state", "apply", "revert"]

APPLIED, APPLICABLE, CONFLICTING = "applied", "applicable", "conflicting"
BACKUP_DIR = ".sgl_eagle_ext_backup"  # inside the sglang package directory


@dataclass(frozen=True)
class Target:
    """An `sglang` package directory and the release it holds."""

    pkg: Path
    version: str

    @property
    def root(self) -> Path:  # the directory the diffs' paths are relative to
        return self.pkg.parent

    def backup(self, patch: Patch) -> Path:
        return self.pkg / BACKUP_DIR / patch.id


def target(sglang_dir: str | Path | None = None, version: str | None = None) -> Target:
    """The installed SGLang (default) or `sglang_dir` (the `sglang` package folder)."""
    if sglang_dir is None:
        pkg = wheels.installed_source()
        if pkg is None:
            raise UserError(
                "SGLang is not installed in this Python environment.",
                fix="install it, or pass --sglang-dir DIR (the `sglang` package "
                "directory to patch)",
            )
    else:
        pkg = Path(sglang_dir).expanduser().resolve()
        if (pkg / "sglang" / "srt").is_dir():
            pkg = pkg / "sglang"  # accept the directory above the package too
        if not (pkg / "srt").is_dir():
            raise UserError(
                f"--sglang-dir {sglang_dir}: not an sglang package directory (no srt/ inside).",
                fix="give the `sglang` folder, e.g. .../site-packages/sglang",
            )
    version = version or wheels.source_version(pkg)
    if not version:
        raise UserError(
            f"{pkg}/_version.py: cannot tell which SGLang release this is.",
            fix="pass --sglang-version V",
        )
    return Target(pkg, version)


def state(patch: Patch, tgt: Target) -> tuple[str, str]:
    """(state, patch's own words when it is conflicting)."""
    diff = patch.diff(tgt.version)
    ok, _ = gnu_patch.run(diff, tgt.root, reverse=True)
    if ok:
        return APPLIED, ""
    ok, out = gnu_patch.run(diff, tgt.root)
    return (APPLICABLE, "") if ok else (CONFLICTING, out)


def apply(patch: Patch, tgt: Target) -> str:
    """Apply `patch` (idempotent). Returns what happened; raises UserError when refused."""
    now, out = state(patch, tgt)
    if now == APPLIED:
        return "already applied"
    if now == CONFLICTING:
        raise UserError(
            f"patch {patch.id} does not apply cleanly to {tgt.pkg} "
            f"(SGLang {tgt.version}); nothing was changed.\n    "
            + "\n    ".join(out.splitlines()[-6:]),
            fix="reinstall a pristine SGLang of that release, or check local edits "
            "to the files the patch touches",
            code=1,
        )
    backup = tgt.backup(patch)
    try:
        backup.mkdir(parents=True, exist_ok=True)
        for rel in patch.files:
            dest = backup / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tgt.root / rel, dest)
        (backup / "patch.json").write_text(
            json.dumps(
                {"id": patch.id, "version": tgt.version, "files": list(patch.files)}, indent=1
            )
        )
        ok, out = gnu_patch.run(patch.diff(tgt.version), tgt.root, dry_run=False)
    except OSError as e:
        raise UserError(
            f"cannot patch {tgt.pkg}: {e}.",
            fix="run as a user who may write to the SGLang installation",
            code=1,
        ) from None
    if not ok:  # the dry run passed, so this is a write failure: put the originals back
        for rel in patch.files:
            shutil.copy2(backup / rel, tgt.root / rel)
        raise UserError(f"patch {patch.id} failed while writing: {out}", code=1)
    return f"applied (backup in {backup})"


def revert(patch: Patch, tgt: Target) -> str:
    now, _ = state(patch, tgt)
    if now == APPLICABLE:
        return "not applied"
    backup = tgt.backup(patch)
    if now == CONFLICTING:
        hint = f"; the pre-patch files are in {backup}" if backup.is_dir() else ""
        raise UserError(
            f"patch {patch.id} cannot be reverted cleanly in {tgt.pkg}: the files "
            f"changed since it was applied{hint}; nothing was changed.",
            fix="reinstall SGLang, or restore the files from the backup",
            code=1,
        )
    ok, out = gnu_patch.run(patch.diff(tgt.version), tgt.root, reverse=True, dry_run=False)
    if not ok:
        raise UserError(f"reverting {patch.id} failed while writing: {out}", code=1)
    shutil.rmtree(backup, ignore_errors=True)
    if backup.parent.is_dir() and not any(backup.parent.iterdir()):
        backup.parent.rmdir()
    return "reverted"
