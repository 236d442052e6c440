"""SGLang sources to read: the installed one, or a release's pristine wheel. Never installs.

    python -m sgl_eagle_ext.wheels 0.5.10.post1      # prints the unpacked `sglang` dir

Used to read a release's code (model registry, get_context_length) and by CI to
check that patches and anchors fit the pristine source of every release.
Wheels are fetched with `pip download --no-deps` and cached under
~/.cache/sgl-eagle-ext/wheels (EAGLE_EXT_CACHE moves the root).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError, cli

# The wheels of 0.5.13+ are cp311 manylinux builds: ask for that platform
# explicitly so the download does not depend on the Python running it.
PLATFORM_ARGS = (
    "--only-binary=:all:",
    "--implementation",
    "cp",
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_34_x86_64",
)


def cache_root() -> Path:
    root = os.environ.get("EAGLE_EXT_CACHE", "~/.cache/sgl-eagle-ext")
    return Path(root).expanduser() / "wheels"


# A release as the cache names its folder: PEP 440 characters only, no path parts.
VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?")


def check_version(version) -> str:
    """`version` if it is a release number (it becomes a folder name under the cache:
    `../../X` or `/etc` must never get that far); else one UserError."""
    if not isinstance(version, str) or len(version) > 40 or not VERSION.fullmatch(version):
        shown = repr(version)[:50]
        raise UserError(
            f"SGLang version {shown}: not a release number.",
            fix="give it as SGLang spells it, e.g. 0.5.23 or 0.5.10.post1",
        )
    return version


def _wheel_in(folder: Path, version: str) -> Path | None:
    found = sorted(folder.glob(f"sglang-{version}-*.whl")) if folder.is_dir() else []
    return found[0] if found else None


def wheel(version: str, *, download: bool = True) -> Path | None:
    """The cached wheel of `version` (downloaded with pip if absent and `download`)."""
    folder = cache_root() / check_version(version)
    found = _wheel_in(folder, version)
    if found or not download:
        return found
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        *PLATFORM_ARGS,
        "-d",
        str(folder),
        f"sglang=={version}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = _wheel_in(folder, version)
    if done.returncode != 0 or not found:
        if made:  # an unknown release leaves no empty folder behind
            shutil.rmtree(folder, ignore_errors=True)
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = "\n    ".join(
            ln[:300] for ln in ([ln for ln in lines if "ERROR" in ln] or lines)[-3:]
        )
        raise UserError(
            f"could not download the sglang {version} wheel:\n    {tail}",
            fix="check network access to the package index (pip download "
            f"--no-deps sglang=={version} must work), or put the wheel in "
            f"{folder}",
        )
    return found


def source(version: str, *, download: bool = True) -> Path | None:
    """The unpacked `sglang` package directory of `version`'s wheel (cached).

    Only `sglang/**/*.py` is unpacked: that is all anyone reads. Returns None
    when the wheel is not cached and `download` is False.
    """
    dest = cache_root() / check_version(version) / "src"
    pkg = dest / "sglang"
    if (dest / ".complete").is_file():
        return pkg
    whl = wheel(version, download=download)
    if whl is None:
        return None
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared read-only
    try:
        with zipfile.ZipFile(whl) as z:
            for name in z.namelist():
                if name.startswith("sglang/") and name.endswith(".py"):
                    z.extract(name, tmp)
        (tmp / ".complete").write_text(whl.name + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)  # atomic: a parallel reader sees all of it or nothing
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return pkg


def installed_source() -> Path | None:
    """The installed `sglang` package directory (found without importing it)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def source_version(pkg: Path) -> str | None:
    """The release an `sglang` package directory holds (from its _version.py)."""
    from sgl_eagle_ext.common import safe_files

    try:  # a FIFO, a device or a huge or non-UTF-8 file: no version, never a hang
        text = safe_files.read_text("", Path(pkg) / "_version.py", cap=64 * 1024)
    except (OSError, UserError):
        return None
    m = re.search(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def source_for(version: str, *, download: bool = False) -> Path | None:
    """Where to read `version`'s code: the installed source if it is that release,
    else the cached pristine wheel (downloaded only if `download`)."""
    pkg = installed_source()
    if pkg is not None and source_version(pkg) == version:
        return pkg
    return source(version, download=download)


@cli("sgl_eagle_ext.wheels")
def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m sgl_eagle_ext.wheels",
        description="Download (cached) and unpack a pristine SGLang "
        "wheel; print its `sglang` source directory.",
    )
    p.add_argument("versions", nargs="+", help="SGLang releases, e.g. 0.5.10.post1")
    args = p.parse_args(argv)
    for v in args.versions:
        print(source(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
