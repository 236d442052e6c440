"""Every link between the README and the pages under docs/ resolves (issue 35): the
README is a front door whose details are one link away, so a moved section or a renamed
heading must not leave a link pointing nowhere. Anchors follow GitHub's rule for heading
ids (lower case, punctuation dropped, spaces to hyphens, repeats numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    ids = set()
    for line in prose(path.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids


def test_slug_follows_github():
    assert slug("## tune live: one load, every step count measured".lstrip("# ")) == (
        "tune-live-one-load-every-step-count-measured"
    )
    assert slug("SGLang's PCIe all-reduce: the `pcie-allreduce` overlay") == (
        "sglangs-pcie-all-reduce-the-pcie-allreduce-overlay"
    )
    assert slug("1. Host requirements") == "1-host-requirements"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_internal_link_resolves(page):
    broken = []
    for line in prose(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
