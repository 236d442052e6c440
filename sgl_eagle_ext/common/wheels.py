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


def _wheel_in(folder: Path, version: str) -> Path | None:
    found = sorted(folder.glob(f"sglang-{version}-*.whl")) if folder.is_dir() else []
    return found[0] if found else None


def wheel(version: str, *, download: bool = True) -> Path | None:
    """The cached wheel of `version` (downloaded with pip if absent and `download`)."""
    folder = cache_root() / version
    found = _wheel_in(folder, version)
    if found or not download:
        return found
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
    dest = cache_root() / version / "src"
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
    try:
        text = (Path(pkg) / "_version.py").read_text()
    except OSError:
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
