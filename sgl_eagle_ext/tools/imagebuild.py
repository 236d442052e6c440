"""python -m sgl_eagle_ext.imagebuild: the Docker image's build-time gate.

Run by the Dockerfile after SGLang and this project are installed:

    python -m sgl_eagle_ext.imagebuild --sglang-version 0.5.23 \
        --record /etc/sgl-eagle-ext/image.json

It fails the build (exit 1) unless
  * the requested release is one the release table supports,
  * the installed SGLang is that release and torch is the release's pin,
  * every patch that patches/manifest.toml marks for the image (`docker = true`)
    for that release is applied (it applies them, unless --check-only) and then
    checks as applied,
  * the entry point modules import.
--record writes what was checked as JSON, so a running container can say what it holds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib import metadata

from sgl_eagle_ext.common import paths, releases
from sgl_eagle_ext.common.contract import SERVE_MODULE
from sgl_eagle_ext.common.errors import UserError, cli
from sgl_eagle_ext.tools import patches

PROG = "sgl_eagle_ext.imagebuild"
# What the image runs: the ENTRYPOINT, the HEALTHCHECK and the server entry.
ENTRY_MODULES = (
    "sgl_eagle_ext.launch",
    "sgl_eagle_ext.healthcheck",
    SERVE_MODULE,
    "sgl_eagle_ext.preflight",
    "sgl_eagle_ext.patches",
    "sgl_eagle_ext.router",
)


def supported(version: str) -> releases.Release:
    if version not in releases.BY_VERSION:
        raise UserError(
            f"SGLang {version} is not a supported release (supported: "
            f"{', '.join(releases.BY_VERSION)}).",
            fix=f"build with --build-arg SGLANG_VERSION=<one of those>; the "
            f"default is {releases.PRIMARY.version}",
            code=1,
        )
    return releases.BY_VERSION[version]


def public(version: str) -> str:
    return version.split("+", 1)[0]


def image_patches(release: releases.Release) -> tuple[list[patches.Patch], list[patches.Patch]]:
    """(patches marked for the image, patches of the release that are not)."""
    todo = patches.for_release(release.version)
    return [p for p in todo if p.docker], [p for p in todo if not p.docker]


def run(
    version: str,
    *,
    sglang_dir: str | None = None,
    check_only: bool = False,
    torch_check: bool = True,
) -> dict:
    release = supported(version)
    tgt = patches.target(sglang_dir)
    if tgt.version != release.version:
        raise UserError(
            f"the installed SGLang is {tgt.version} ({tgt.pkg}), not {version}.",
            fix="install sglang==" + version,
            code=1,
        )
    record: dict = {
        "sglang": tgt.version,
        "sglang_dir": str(tgt.pkg),
        "primary": release is releases.PRIMARY,
    }
    print(
        f"{PROG}: SGLang {tgt.version} at {tgt.pkg} (supported"
        f"{', the primary release' if release is releases.PRIMARY else ''})"
    )

    if torch_check:
        try:
            torch = metadata.version("torch")
        except metadata.PackageNotFoundError:
            raise UserError(
                "torch is not installed.", fix=f"install torch=={release.torch}", code=1
            ) from None
        if public(torch) != release.torch:
            raise UserError(
                f"torch {torch} is installed; SGLang {version} pins {release.torch} "
                f"(sgl_eagle_ext/common/releases.py).",
                fix="let pip resolve torch from SGLang's own requirement",
                code=1,
            )
        record["torch"] = torch
        print(f"{PROG}: torch {torch} (the release pins {release.torch})")

    wanted, left_out = image_patches(release)
    record["patches"] = {}
    for p in wanted:
        if not check_only:
            print(f"{PROG}: patch {p.id}: {patches.apply(p, tgt)}")
        state, out = patches.state(p, tgt)
        if state != patches.APPLIED:
            raise UserError(
                f"patch {p.id} is {state} in {tgt.pkg} after the build step"
                + (f":\n    {out}" if out else "."),
                fix="python -m sgl_eagle_ext.patches check (see patches/manifest.toml)",
                code=1,
            )
        record["patches"][p.id] = state
        print(f"{PROG}: patch {p.id}: checked: {state} ({p.title})")
    for p in left_out:
        print(f"{PROG}: patch {p.id}: not marked for the image (docker = false); not applied")
    if not wanted:
        print(f"{PROG}: no patch is marked for the image for SGLang {tgt.version}")

    for name in ENTRY_MODULES:
        importlib.import_module(name)
    record["entry_modules"] = list(ENTRY_MODULES)
    print(f"{PROG}: entry modules import: {', '.join(ENTRY_MODULES)}")
    return record


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    p.add_argument(
        "--sglang-version",
        required=True,
        help="the release the image was asked to hold (the SGLANG_VERSION build arg)",
    )
    p.add_argument("--sglang-dir", help="the `sglang` package directory (default: the installed)")
    p.add_argument("--check-only", action="store_true", help="apply nothing, only check")
    p.add_argument("--no-torch-check", action="store_true", help="skip the torch pin check")
    p.add_argument("--record", help="write the checked facts to this JSON file")
    args = p.parse_args(argv)
    if args.record:  # refused before the build step, not after it
        paths.check_writable_file("--record", args.record)
    record = run(
        args.sglang_version,
        sglang_dir=args.sglang_dir,
        check_only=args.check_only,
        torch_check=not args.no_torch_check,
    )
    if args.record:
        out = paths.write_text("--record", args.record, json.dumps(record, indent=1) + "\n")
        print(f"{PROG}: wrote {out}")
    print(f"{PROG}: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
