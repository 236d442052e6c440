"""Source patches for SGLang releases (patches/manifest.toml): state, apply, revert.

A patch's state in an `sglang` package directory is one of
  applied      its reverse applies cleanly (the fixed code is there);
  applicable   it applies cleanly (the pristine code is there);
  conflicting  neither: the files differ from both (another version, local edits).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.tools import wheels
from sgl_eagle_ext.tools.patches import gnu_patch
from sgl_eagle_ext.tools.patches.manifest import Patch, for_release, load
from sgl_eagle_ext.tools.patches.transaction import Transaction, confined, locked, write_atomic

__all__ = [
    "Patch",
    "Target",
    "load",
    "for_release",
    "target",
    "state",
    "apply",
    "revert",
    "apply_all",
    "revert_all",
    "recover",
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


def _transaction(tgt: Target) -> Transaction:
    return Transaction(tgt.pkg, tgt.pkg / BACKUP_DIR)


def recover(tgt: Target) -> str:
    """Roll back a command that was killed half-way (see transaction.py); "" if none."""
    txn = _transaction(tgt)
    confined(tgt.pkg, txn.backup)
    with locked(tgt.pkg):
        return txn.roll_back()


def _refuse_conflicts(todo: list[Patch], tgt: Target, states: dict, verb: str) -> None:
    bad = [p for p in todo if states[p.id][0] == CONFLICTING]
    if not bad:
        return
    p, out = bad[0], states[bad[0].id][1]
    if verb == "apply":
        raise UserError(
            f"patch {p.id} does not apply cleanly to {tgt.pkg} "
            f"(SGLang {tgt.version}); nothing was changed.\n    "
            + "\n    ".join(out.splitlines()[-6:]),
            fix="reinstall a pristine SGLang of that release, or check local edits "
            "to the files the patch touches",
            code=1,
        )
    backup = tgt.backup(p)
    hint = f"; the pre-patch files are in {backup}" if backup.is_dir() else ""
    raise UserError(
        f"patch {p.id} cannot be reverted cleanly in {tgt.pkg}: the files "
        f"changed since it was applied{hint}; nothing was changed.",
        fix="reinstall SGLang, or restore the files from the backup",
        code=1,
    )


def _change(todo: list[Patch], tgt: Target, verb: str) -> dict[str, str]:
    """Apply (or revert) every patch of `todo` as one transaction: all or none."""
    txn = _transaction(tgt)
    txn.check_paths(list(dict.fromkeys(rel for p in todo for rel in p.files)), [p.id for p in todo])
    recover(tgt)
    states = {p.id: state(p, tgt) for p in todo}
    _refuse_conflicts(todo, tgt, states, verb)
    wanted = APPLICABLE if verb == "apply" else APPLIED
    work = [p for p in todo if states[p.id][0] == wanted]
    done = {
        p.id: "already applied" if verb == "apply" else "not applied" for p in todo if p not in work
    }
    if not work:
        return done
    files = list(dict.fromkeys(rel for p in work for rel in p.files))
    try:
        txn.begin(verb, files, [p.id for p in work])
        for p in work:
            if verb == "apply":
                _save_backup(p, tgt)
            ok, out = gnu_patch.run(
                p.diff(tgt.version), tgt.root, reverse=verb == "revert", dry_run=False
            )
            if not ok:  # the dry run passed, so this is a write failure
                raise OSError(f"patch {p.id}: {out}")
            done[p.id] = f"applied (backup in {tgt.backup(p)})" if verb == "apply" else "reverted"
        txn.commit(drop_backups=[p.id for p in work] if verb == "revert" else [])
    except OSError as e:
        undo = txn.roll_back()  # a failed rollback is its own UserError
        raise UserError(
            f"cannot {verb} patches in {tgt.pkg}: {getattr(e, 'strerror', None) or e}"
            f"; {undo or 'nothing was changed'}.",
            fix="run as a user who may write to the SGLang installation",
            code=1,
        ) from None
    return done


def _save_backup(patch: Patch, tgt: Target) -> None:
    backup = tgt.backup(patch)
    for rel in patch.files:
        src = tgt.root / rel
        write_atomic(backup / rel, src.read_bytes(), like=src)
    write_atomic(
        backup / "patch.json",
        json.dumps(
            {"id": patch.id, "version": tgt.version, "files": list(patch.files)}, indent=1
        ).encode(),
    )


def apply_all(todo: list[Patch], tgt: Target) -> dict[str, str]:
    """Apply the applicable patches of `todo` (idempotent), all or none. Returns what
    happened per patch id; raises UserError (nothing changed) when refused."""
    with locked(tgt.pkg):  # parallel runs take turns
        return _change(todo, tgt, "apply")


def revert_all(todo: list[Patch], tgt: Target) -> dict[str, str]:
    with locked(tgt.pkg):
        return _change(todo, tgt, "revert")


def apply(patch: Patch, tgt: Target) -> str:
    return apply_all([patch], tgt)[patch.id]


def revert(patch: Patch, tgt: Target) -> str:
    return revert_all([patch], tgt)[patch.id]
