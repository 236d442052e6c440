"""patches/: manifest, and every patch against the pristine source of each release it names.

The pristine sources come from `pip download --no-deps sglang==V` (cached in
~/.cache/sgl-eagle-ext/wheels; the first run needs network). Patching works on
a copy of the touched files, never on the cache or the installed SGLang.
"""

from __future__ import annotations

import hashlib
import py_compile
import shutil
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases, wheels
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.patches import manifest
from sgl_eagle_ext.tools import patches
from sgl_eagle_ext.tools.patches.cli import main as patches_main

PATCHES = patches.load()
CASES = [(p, r) for p in PATCHES for r in p.releases]


def digest(root: Path) -> dict[str, str]:
    return {
        str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(root.rglob("*"))
        if f.is_file()
    }


def pristine_copy(tmp: Path, version: str, files) -> Path:
    """A minimal `sglang` package dir holding `files` of `version`'s pristine source."""
    src = wheels.source(version)
    pkg = tmp / version / "sglang"
    for rel in [*files, "sglang/_version.py"]:
        dest = tmp / version / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src.parent / rel, dest)
    return pkg


def test_manifest_describes_every_patch():
    assert {"cuda-graph-aux-layers", "deepseek-aux-offset"} <= {p.id for p in PATCHES}
    for p in PATCHES:
        assert p.releases and p.files and p.problem and p.needed_when and p.upstream
        assert isinstance(p.docker, bool)
        for r in p.releases:
            assert r in releases.BY_VERSION, f"{p.id}: {r} is not a supported release"
            text = p.diff(r).read_text()
            named = {line.split()[1][2:] for line in text.splitlines() if line.startswith("+++ ")}
            assert named == set(p.files), f"{p.id}: manifest files != files in the diff"


def test_release_patches_are_read_from_the_manifest(tmp_path, monkeypatch):
    """Release.patches is the manifest's list: edit the manifest and it follows."""
    old = releases.BY_VERSION["0.5.10.post1"]
    assert set(old.patches) == {"cuda-graph-aux-layers", "deepseek-aux-offset"}
    assert releases.PRIMARY.patches == ()
    copy = tmp_path / "patch_files"
    shutil.copytree(manifest.PATCH_DIR, copy)
    text = (copy / "manifest.toml").read_text()
    first = text.split("\n[[patch]]\n")[1]
    assert first.startswith('id = "cuda-graph-aux-layers"')
    (copy / "manifest.toml").write_text(text.replace("\n[[patch]]\n" + first, "\n"))
    monkeypatch.setattr(manifest, "MANIFEST", copy / "manifest.toml")
    assert old.patches == ("deepseek-aux-offset",)


@pytest.mark.harness
@pytest.mark.parametrize("patch, version", CASES, ids=[f"{p.id}@{r}" for p, r in CASES])
def test_patch_applies_cleanly_to_pristine_release_and_compiles(tmp_path, patch, version):
    pkg = pristine_copy(tmp_path, version, patch.files)
    tgt = patches.target(pkg)
    assert tgt.version == version
    before = digest(pkg)
    assert patches.state(patch, tgt)[0] == patches.APPLICABLE

    assert patches.apply(patch, tgt).startswith("applied")
    for rel in patch.files:
        py_compile.compile(str(tgt.root / rel), doraise=True, cfile=str(tmp_path / "x.pyc"))
    assert patches.state(patch, tgt)[0] == patches.APPLIED
    assert patches.apply(patch, tgt) == "already applied"  # idempotent
    assert not list(tgt.root.rglob("*.orig")) and not list(tgt.root.rglob("*.rej"))
    for rel in patch.files:  # the backup holds the pristine bytes
        assert (tgt.backup(patch) / rel).read_bytes() == (
            wheels.source(version).parent / rel
        ).read_bytes()

    assert patches.revert(patch, tgt) == "reverted"
    assert digest(pkg) == before
    assert patches.revert(patch, tgt) == "not applied"


@pytest.mark.harness
def test_conflicting_patch_is_refused_and_files_stay_untouched(tmp_path):
    patch = next(p for p in PATCHES if len(p.files) > 1)
    version = patch.releases[0]
    pkg = pristine_copy(tmp_path, version, patch.files)
    # Local edit in the second file's hunk: the first file would still apply alone.
    edited = pkg.parent / patch.files[1]
    edited.write_text(
        edited.read_text().replace(
            "set_eagle3_layers_to_capture()", "set_eagle3_layers_to_capture(  )"
        )
    )
    before = digest(pkg)
    tgt = patches.target(pkg)
    assert patches.state(patch, tgt)[0] == patches.CONFLICTING
    with pytest.raises(UserError, match="does not apply cleanly"):
        patches.apply(patch, tgt)
    assert digest(pkg) == before
    assert not tgt.backup(patch).exists()


@pytest.mark.harness
def test_patch_for_another_release_is_conflicting(tmp_path):
    patch = next(p for p in PATCHES if p.id == "deepseek-aux-offset")
    pkg = pristine_copy(tmp_path, "0.5.23", patch.files)
    tgt = patches.Target(pkg, "0.5.10.post1")  # pretend: the wrong release's code
    assert patches.state(patch, tgt)[0] == patches.CONFLICTING


@pytest.mark.harness
def test_cli_check_apply_revert(tmp_path, capsys):
    files = sorted({f for p in PATCHES if "0.5.10.post1" in p.releases for f in p.files})
    pkg = pristine_copy(tmp_path, "0.5.10.post1", files)
    before = digest(pkg)
    assert patches_main(["check", "--sglang-dir", str(pkg)]) == 1
    out = capsys.readouterr().out
    assert "applicable" in out and "SGLang 0.5.10.post1" in out
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 0
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 0
    assert "already applied" in capsys.readouterr().out
    assert patches_main(["check", "--sglang-dir", str(pkg.parent)]) == 0  # parent dir accepted
    assert patches_main(["revert", "--sglang-dir", str(pkg)]) == 0
    assert digest(pkg) == before


@pytest.mark.harness
def test_cli_bad_input(tmp_path, capsys):
    assert patches_main(["check", "--sglang-dir", str(tmp_path)]) == 2
    assert "not an sglang package directory" in capsys.readouterr().err
    pkg = pristine_copy(tmp_path, "0.5.10.post1", ["sglang/srt/models/deepseek_v2.py"])
    assert patches_main(["apply", "--sglang-dir", str(pkg), "--id", "nope"]) == 2
    assert "no such patch" in capsys.readouterr().err


@pytest.mark.harness
def test_missing_gnu_patch_is_a_clear_error(tmp_path, monkeypatch):
    patch = PATCHES[0]
    pkg = pristine_copy(tmp_path, patch.releases[0], patch.files)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="apt-get install -y patch"):
        patches.state(patch, patches.target(pkg))


@pytest.mark.harness
def test_wheel_cache_is_reused(monkeypatch):
    wheels.source("0.5.10.post1")  # cached by the tests above

    def no_download(*a, **k):
        raise AssertionError("downloaded again")

    monkeypatch.setattr(wheels.subprocess, "run", no_download)
    assert (wheels.source("0.5.10.post1") / "srt").is_dir()
    assert wheels.source_version(wheels.source("0.5.10.post1")) == "0.5.10.post1"
