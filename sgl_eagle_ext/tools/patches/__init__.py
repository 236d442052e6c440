"""Source patches for SGLang releases: apply and revert them, all or none.

The list and each patch's state live below the launcher and the tools
(common/patches/: manifest, Target, state), re-exported here for the tool.
"""

from __future__ import annotations

import json

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.patches import (
    APPLICABLE,
    APPLIED,
    BACKUP_DIR,
    CONFLICTING,
    Patch,
    Target,
    for_release,
    gnu_patch,
    load,
    state,
    target,
)
from sgl_eagle_ext.tools.patches.transaction import Transaction, confined, locked, write_atomic

__all__ = [
    "APPLICABLE",
    "APPLIED",
    "BACKUP_DIR",
    "CONFLICTING",
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
