"""Source patches for SGLang releases (patches/manifest.toml): the list and each
patch's state in an `sglang` package directory (read-only: dry runs of GNU patch).
Applying and reverting them is the operator tool's job (tools/patches/).

A patch's state in an `sglang` package directory is one of
  applied      its reverse applies cleanly (the fixed code is there);
  applicable   it applies cleanly (the pristine code is there);
  conflicting  neither: the files differ from both (another version, local edits).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common import wheels
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.patches import gnu_patch
from sgl_eagle_ext.common.patches.manifest import Patch, for_release, load

__all__ = [
    "APPLICABLE",
    "APPLIED",
    "BACKUP_DIR",
    "CONFLICTING",
    "Patch",
    "Target",
    "for_release",
    "load",
    "state",
    "target",
]

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
