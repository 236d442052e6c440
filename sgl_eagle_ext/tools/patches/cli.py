"""python -m sgl_eagle_ext.patches check|apply|revert [--sglang-dir DIR] [--id ID ...]

check   report each patch of the release as applied / applicable / conflicting;
        exit 0 when all are applied (or the release needs none), else 1
apply   apply the applicable ones (idempotent; a backup of each file is kept in
        <sglang>/.sgl_eagle_ext_backup/<id>/), all of them or none: a conflicting
        patch is refused and no file is touched (exit 1)
revert  un-apply the applied ones, all or none

apply and revert are one transaction each: a command killed half-way is rolled
back by the next apply or revert (tools/patches/transaction.py).
"""

from __future__ import annotations

import argparse
import sys

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.common.table import L, Table
from sgl_eagle_ext.tools import patches

PROG = "sgl_eagle_ext.patches"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}", description="SGLang source patches (patches/manifest.toml)."
    )
    p.add_argument("action", choices=("check", "apply", "revert"))
    p.add_argument(
        "--sglang-dir", help="the `sglang` package directory (default: the installed SGLang)"
    )
    p.add_argument(
        "--sglang-version", help="the release in --sglang-dir (default: read from its _version.py)"
    )
    p.add_argument("--id", action="append", default=[], help="only this patch (repeatable)")
    return p


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    tgt = patches.target(args.sglang_dir, args.sglang_version)
    if tgt.version not in releases.BY_VERSION:
        raise UserError(
            f"SGLang {tgt.version}: not a release this project knows; nothing "
            f"was checked or changed.",
            fix=f"supported releases: {', '.join(releases.BY_VERSION)} "
            f"(sgl_eagle_ext/common/releases.py)",
        )
    todo = patches.for_release(tgt.version)
    unknown = set(args.id) - {p.id for p in todo}
    if unknown:
        raise UserError(
            f"--id {', '.join(sorted(unknown))}: no such patch for SGLang {tgt.version}.",
            fix="see `check` for the patches of this release",
        )
    todo = [p for p in todo if not args.id or p.id in args.id]
    print(f"SGLang {tgt.version} at {tgt.pkg}")
    if not todo:
        print("  no patches for this release")
        return 0
    width = max(len(p.id) for p in todo)
    status = Table(L("patch", width), L("state", 11, sep="  "), L("about", sep="  "), indent="  ")
    if args.action == "check":
        pending = patches.Transaction(tgt.pkg, tgt.pkg / patches.BACKUP_DIR).pending()
        if pending:
            print(
                f"  an interrupted `patches {pending.get('op')}` is pending: the next apply "
                f"or revert rolls it back first"
            )
        failed = 0
        for p in todo:
            st, out = patches.state(p, tgt)
            docker = "in the Docker image" if p.docker else "not in the Docker image"
            print(status.row(p.id, st, f"{p.title} ({docker}; upstream {p.upstream})"))
            if out:
                print("      " + "\n      ".join(out.splitlines()[-4:]))
            failed += st != patches.APPLIED
        return 1 if failed else 0
    undone = patches.recover(tgt)
    if undone:
        print(f"  {undone}")
    try:
        done = (patches.apply_all if args.action == "apply" else patches.revert_all)(todo, tgt)
    except UserError as e:
        if e.code == 2:
            raise
        print(f"  refused: {e}", file=sys.stderr)
        return 1
    done_table = Table(L("patch", width), L("result", sep="  "), indent="  ")
    print("\n".join(done_table.render([(p.id, done[p.id]) for p in todo], header=False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
