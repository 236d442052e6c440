"""No tracked file names one machine's checkout (issue 35): the README's commands run
from a clone in any directory, so a test, tool or page that points at `/work/...`,
`/home/<user>/...`, `/Users/<user>/...`, `/root/...` or this clone's own absolute path
works on one machine only. Paths every host or image has are fine: `/models/...` in
examples, `/dev/null`, `/proc/...`, `/tmp/...`, and the image's own `/root/.cache/...`
volumes (inside the container, not a checkout)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A path starts at a `/` that does not continue a word, a path or a URL (`a/work/b`,
# `~/work/`, `https://host/home/` are not machine paths).
_START = r"(?<![\w.~/@$-])"
FORBIDDEN = re.compile(
    _START
    + r"(?:"
    + r"/work/"  # this project's development machines
    + r"|/home/[A-Za-z_][\w.-]*/"  # a user's home (/home/<user>/...)
    + r"|/Users/[A-Za-z_][\w.-]*/"  # macOS homes
    + r"|/root/(?!\.cache\b)"  # root's home, except the image's cache volumes
    + r")"
)


def machine_paths(text: str, checkout: str = "") -> list[str]:
    """The lines of `text` that name a machine's checkout (or `checkout` itself)."""
    return [
        line.strip()
        for line in text.splitlines()
        if FORBIDDEN.search(line) or (len(checkout) > 1 and checkout in line)
    ]


def tracked_files() -> list[Path]:
    """The files git tracks (a clone's content); without git, the tree less what the
    harness and tools create."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
        return [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", "__pycache__", "logs", "node_modules"}
        return [
            p
            for p in ROOT.rglob("*")
            if p.is_file() and not any(part in skip or part.startswith(".venv") for part in p.parts)
        ]


@pytest.mark.parametrize(
    "line",
    [
        "python = Path('/work/main/.venv/bin/python')",
        "see /home/alice/sgl-eagle-ext/README.md",
        "cd /Users/bob/src && make",
        "export PYTHONPATH=/root/sgl-eagle-ext",
        '"cwd": "/work/wt/arch-docs"',
    ],
)
def test_a_machine_path_is_found(line):
    assert machine_paths(line) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "--model-path /models/Kimi-K2.5 --draft-model-path /models/kimi-k2.5-eagle3",
        "-v sgl-cache-sglang:/root/.cache/sglang",
        "FLASHINFER_WORKSPACE_BASE=/root",
        "a closed stdout is given /dev/null; /proc/loadavg; /tmp/x.log",
        "https://example.com/home/alice/x and src/work/y and ~/work/z",
        "-v /srv/sgl/logs:/workspace/logs",
    ],
)
def test_a_portable_path_is_not(line):
    assert machine_paths(line) == []


def test_the_checkout_itself_is_found():
    assert machine_paths(f"open('{ROOT}/launch/x.toml')", str(ROOT)) != []


def test_no_tracked_file_names_a_machine_checkout():
    found = []
    me = Path(__file__).resolve()
    for path in tracked_files():
        if path.resolve() == me or not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary: no path a reader follows
        found += [f"{path.relative_to(ROOT)}: {ln}" for ln in machine_paths(text, str(ROOT))]
    assert not found, "absolute paths of one machine (find them from the checkout):\n" + (
        "\n".join(found[:40])
    )
