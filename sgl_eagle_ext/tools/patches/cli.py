"""python -m sgl_eagle_ext.patches check|apply|revert [--sglang-dir DIR] [--id ID ...]

check   report each patch of the release as applied / applicable / conflicting;
        exit 0 when all are applied (or the release needs none), else 1
apply   apply the applicable ones (idempotent; a backup of each file is kept in
        <sglang>/.sgl_eagle_ext_backup/<id>/); a conflicting patch is refused and its
        files are left untouched (exit 1)
revert  un-apply the applied ones
"""

from __future__ import annotations

import argparse
import sys

from sgl_eagle_ext.common.errors import UserError, cli
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
    failed = 0
    for p in todo:
        if args.action == "check":
            st, out = patches.state(p, tgt)
            docker = "in the Docker image" if p.docker else "not in the Docker image"
            print(f"  {p.id:{width}}  {st:11}  {p.title} ({docker}; upstream {p.upstream})")
            if out:
                print("      " + "\n      ".join(out.splitlines()[-4:]))
            failed += st != patches.APPLIED
            continue
        try:
            what = (patches.apply if args.action == "apply" else patches.revert)(p, tgt)
        except UserError as e:
            print(f"  {p.id:{width}}  refused: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"  {p.id:{width}}  {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
