"""cpu/install.py ships in the wheel but builds the harness only from a source
checkout: from an installed package it says so in one line and exits 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sgl_eagle_ext"


def test_from_an_installed_package_it_refuses_in_one_line(tmp_path):
    # The wheel's layout: the package alone in site-packages, no harness/ beside it.
    site = tmp_path / "site-packages"
    shutil.copytree(
        PACKAGE, site / "sgl_eagle_ext", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    p = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.cpu.install", "--all"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "only from a source checkout" in lines[0], p.stderr
    assert p.stdout == "" and "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["site-packages"]  # no venv made
