"""patches/manifest.toml: the list of source patches and the diff of each per release."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from sgl_eagle_ext.common.errors import UserError

# The top-level patches/ folder (symlink, as preset_files -> ../launch).
PATCH_DIR = Path(__file__).resolve().parent / "patch_files"
MANIFEST = PATCH_DIR / "manifest.toml"
FIELDS = {
    "id": str,
    "title": str,
    "releases": list,
    "files": list,
    "problem": str,
    "needed_when": str,
    "docker": bool,
    "upstream": str,
}


@dataclass(frozen=True)
class Patch:
    id: str
    title: str
    releases: tuple[str, ...]
    files: tuple[str, ...]  # relative to the directory holding the `sglang` package
    problem: str
    needed_when: str
    docker: bool  # applied at build time by the project's Docker image
    upstream: str
    root: Path = PATCH_DIR

    def diff(self, release: str) -> Path:
        return self.root / release / f"{self.id}.diff"


def load(path: Path = MANIFEST) -> list[Patch]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UserError(
            f"{path}: cannot read the patch manifest: {e}.",
            fix="restore patches/manifest.toml from the repository",
        ) from None
    out: list[Patch] = []
    for i, entry in enumerate(data.get("patch", [])):
        where = f"{path}: [[patch]] #{i + 1}"
        for name, kind in FIELDS.items():
            if not isinstance(entry.get(name), kind):
                raise UserError(
                    f"{where}: field '{name}' is missing or not a {kind.__name__}.",
                    fix=f"set {name} (see the comment at the top of the manifest)",
                )
        patch = Patch(
            entry["id"],
            entry["title"],
            tuple(entry["releases"]),
            tuple(entry["files"]),
            entry["problem"].strip(),
            entry["needed_when"].strip(),
            entry["docker"],
            entry["upstream"],
            Path(path).parent,
        )
        for release in patch.releases:
            if not patch.diff(release).is_file():
                raise UserError(
                    f"{where} ({patch.id}): no diff {patch.diff(release)}.",
                    fix=f"write it as a unified diff against sglang {release}",
                )
        out.append(patch)
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise UserError(f"{path}: duplicate patch ids in {ids}.", fix="make every id unique")
    return out


def for_release(version: str, path: Path = MANIFEST) -> list[Patch]:
    return [p for p in load(path) if version in p.releases]
