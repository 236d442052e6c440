"""Install the CPU harness: a virtual environment with a real, pinned SGLang release.

    python3 -m sgl_eagle_ext.cpu.install [--release 0.5.23] [--venv .venv]

A plain `pip install sglang` fails on a machine without GPU (GPU-only wheels,
a placeholder package whose build downloads from an unreachable host). The
route that works: the torch release SGLang pins (or the table's `cpu_torch`),
then SGLang with --no-deps, then its CPU-usable dependencies pinned in
harness/<file> (named by the release table), then this project in editable
mode, and a .pth file that lets a CUDA-linked torchvision import on CPU torch
(cpu/torchvision_ops.py). Re-running is cheap: a stamp
records what was installed. Uses only the standard library (runs before the
venv exists).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError, cli

REPO = Path(__file__).resolve().parents[2]
HARNESS_DIR = REPO / "harness"
STAMP = ".sgl-eagle-ext-harness"
PROG = "sgl_eagle_ext.cpu.install"
# This machine's pip configuration warns once per package about missing local
# index folders; those lines say nothing about the install.
NOISE = ("WARNING: Location 'file://",)


def check_source_checkout(repo: Path = REPO) -> None:
    """The harness is built from a source checkout (its harness/ requirements files,
    an editable install of the project): an installed wheel has neither."""
    if not (repo / "harness").is_dir() or not (repo / "pyproject.toml").is_file():
        raise UserError(
            f"the CPU harness installs only from a source checkout of sgl-eagle-ext "
            f"(no harness/ folder beside {repo / 'sgl_eagle_ext'}): git clone the project "
            f"and run this from there."
        )


def default_venv(release: releases.Release) -> Path:
    if release is releases.PRIMARY:
        return REPO / ".venv"
    return REPO / f".venv-{release.version}"


def fingerprint(release: releases.Release) -> str:
    h = hashlib.sha256()
    for part in (
        release.version,
        release.harness_torch,
        release.torchvision or "",
        release.cpu_requirements or "",
    ):
        h.update(part.encode())
    for f in (HARNESS_DIR / release.cpu_requirements, REPO / "pyproject.toml"):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run(cmd: list[str], what: str) -> None:
    t0 = time.monotonic()
    print(f"  {what} ...", end="", flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [ln for ln in p.stdout.splitlines() if not ln.startswith(NOISE)]
    if p.returncode != 0:
        print(" failed")
        print("\n".join(lines[-40:]), file=sys.stderr)
        raise UserError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}", code=1)
    print(f" {time.monotonic() - t0:.0f} s", flush=True)


def write_torchvision_pth(py: Path) -> None:
    """A .pth that lets a CUDA-linked torchvision import on CPU torch in every
    interpreter of the venv (cpu/torchvision_ops.py; inert where _C loads)."""
    from sgl_eagle_ext.cpu import torchvision_ops

    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run(
        [str(py), "-c", where], capture_output=True, text=True, check=True
    ).stdout.strip()
    (Path(site) / torchvision_ops.PTH_NAME).write_text(torchvision_ops.PTH_LINE)


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def install(release: releases.Release, venv_arg: str | None, recreate: bool) -> None:
    if not release.cpu_requirements:
        supported = [r.version for r in releases.RELEASES if r.cpu_requirements]
        raise UserError(
            f"the CPU harness cannot run SGLang {release.version}.",
            fix=f"use one of: {', '.join(supported)}",
        )
    if sys.version_info < (3, 11):  # noqa: UP036 - runs under any python3, before the venv
        raise UserError(
            f"Python {sys.version.split()[0]} is too old for SGLang {release.version}.",
            fix="run this with python3.11 or newer",
        )
    venv = Path(venv_arg) if venv_arg else default_venv(release)
    stamp = venv / STAMP
    want = fingerprint(release)
    if recreate and venv.exists():
        shutil.rmtree(venv)
    if stamp.is_file() and stamp.read_text().strip() == want:
        print(f"{PROG}: {venv} is up to date (SGLang {release.version})")
        return

    t0 = time.monotonic()
    print(f"{PROG}: installing SGLang {release.version} for CPU into {venv}")
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], "create the virtual environment")
    torch = [f"torch=={release.harness_torch}"]
    if release.torchvision:
        torch.append(f"torchvision=={release.torchvision}")
    run(pip + torch, " + ".join(torch))
    run(pip + ["--no-deps", f"sglang=={release.version}"], f"sglang {release.version} (no deps)")
    run(
        pip + ["-r", str(HARNESS_DIR / release.cpu_requirements)],
        f"CPU dependencies ({release.cpu_requirements})",
    )
    run(pip + ["-e", f"{REPO}[test]"], "sgl-eagle-ext (editable)")
    write_torchvision_pth(py)
    stamp.write_text(want + "\n")
    print(f"{PROG}: done in {time.monotonic() - t0:.0f} s; {venv} holds {du(venv) / 2**30:.1f} GiB")


BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def install_browser() -> None:
    """The test suite renders the bench HTML report in a headless browser. As root
    on Debian/Ubuntu, install chromium from the distribution; otherwise say how."""
    if any(shutil.which(b) for b in BROWSERS):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print(
            f"{PROG}: note: no headless browser; the HTML report test needs one "
            "(as root: apt-get install -y chromium)"
        )
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd, what in (
        (["apt-get", "update", "-qq"], "apt-get update"),
        (["apt-get", "install", "-y", "-qq", "chromium"], "chromium (Debian)"),
    ):
        t0 = time.monotonic()
        print(f"  {what} ...", end="", flush=True)
        p = subprocess.run(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if p.returncode != 0:
            print(" failed")
            print("\n".join(p.stdout.splitlines()[-20:]), file=sys.stderr)
            raise UserError(f"{what} failed (exit {p.returncode})", code=1)
        print(f" {time.monotonic() - t0:.0f} s", flush=True)


@cli(PROG)
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python3 -m {PROG}", description=__doc__.split("\n")[0])
    p.add_argument(
        "--release",
        default=releases.PRIMARY.version,
        help=f"SGLang release (default {releases.PRIMARY.version})",
    )
    p.add_argument(
        "--venv",
        help="virtual environment folder (default .venv for the primary "
        "release, .venv-<release> otherwise)",
    )
    p.add_argument("--recreate", action="store_true", help="delete the venv first")
    p.add_argument(
        "--all",
        action="store_true",
        help="every release the harness runs (the test suite covers both EAGLE "
        "worker generations): .venv and .venv-<release>",
    )
    args = p.parse_args(argv)
    check_source_checkout()

    if args.all:
        if args.venv:
            raise UserError(
                "--all builds one venv per release in its default place.",
                fix="drop --venv, or name one --release",
            )
        for release in releases.RELEASES:
            if release.cpu_requirements:
                install(release, None, args.recreate)
        install_browser()
        return 0
    release, _ = releases.resolve(args.release)
    install(release, args.venv, args.recreate)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
