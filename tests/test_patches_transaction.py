"""`patches apply|revert` as one transaction: killed at random points, never a
half-applied tree after a rerun; nothing written through a link; clear refusals.

Works on a small copy of the files the 0.5.10.post1 patches touch (pristine wheel
source, as in test_patches.py); never on the installed SGLang."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import pytest

from sgl_eagle_ext.tools import patches
from sgl_eagle_ext.tools.patches import transaction
from sgl_eagle_ext.tools.patches.cli import main as patches_main
from tests.test_patches import PATCHES, digest, pristine_copy

VERSION = "0.5.10.post1"
FILES = sorted({f for p in PATCHES if VERSION in p.releases for f in p.files})
KILLS = 100


@pytest.fixture
def pkg(tmp_path):
    return pristine_copy(tmp_path, VERSION, FILES)


def sources(pkg) -> dict[str, str]:
    """The SGLang files only (not our backup folder)."""
    return {k: v for k, v in digest(pkg).items() if not k.startswith(patches.BACKUP_DIR)}


def run_forked(argv: list[str], kill_after: float | None) -> tuple[bool, float]:
    """Run the CLI in a forked child (no interpreter start-up: dense kill points);
    SIGKILL it after `kill_after` s. Returns (was killed while running, seconds)."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the real command, output discarded
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            code = patches_main(argv)
        except BaseException:
            code = 99
        os._exit(code)
    killed, done = False, 0
    if kill_after is not None:
        time.sleep(kill_after)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
    if done == 0:
        _, status = os.waitpid(pid, 0)
    if not killed:
        assert os.waitstatus_to_exitcode(status) == 0, f"{argv} failed"
    return killed, time.perf_counter() - t0


@pytest.mark.skipif(sys.platform != "linux", reason="fork + SIGKILL")
def test_kill_at_random_points_never_leaves_a_half_applied_tree(pkg):
    pristine = sources(pkg)
    run_forked(["apply", "--sglang-dir", str(pkg)], None)
    patched = sources(pkg)
    assert patched != pristine
    _, took = run_forked(["revert", "--sglang-dir", str(pkg)], None)
    assert sources(pkg) == pristine
    rng = random.Random(13)
    journal = pkg / patches.BACKUP_DIR / transaction.JOURNAL
    kills = in_transaction = torn = half_applied = i = 0
    while kills < KILLS:
        op = ("apply", "revert")[i % 2]
        i += 1
        argv = [op, "--sglang-dir", str(pkg)]
        killed, _ = run_forked(argv, rng.uniform(0, took))
        if not killed:
            continue  # it finished first; the next op undoes it
        kills += 1
        in_transaction += journal.exists()
        torn += sources(pkg) not in (pristine, patched)  # killed between two file writes
        run_forked(argv, None)  # the rerun: rolls back what was left, then does its work
        half_applied += sources(pkg) != (patched if op == "apply" else pristine)
        assert not journal.exists()
        backup = pkg / patches.BACKUP_DIR
        assert not list(backup.glob(".*.tmp-*"))  # no debris of a write the kill cut
        if op == "revert":  # no stale backup of a revert killed while dropping them
            assert not backup.exists(), sorted(backup.rglob("*"))
    print(
        f"\nkill test: {kills} kills ({in_transaction} inside a transaction, {torn} with "
        f"the tree torn between files), {half_applied} half-applied trees after a rerun"
    )
    assert half_applied == 0
    assert in_transaction > 0  # the kills did land where it matters


def test_linked_backup_folder_is_refused(pkg, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (pkg / patches.BACKUP_DIR).symlink_to(outside)
    before = sources(pkg)
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "Traceback" not in err
    assert sources(pkg) == before and not any(outside.iterdir())


def test_linked_patch_backup_or_source_file_is_refused(pkg, tmp_path, capsys):
    victim = tmp_path / "victim.py"
    victim.write_text("keep me\n")
    target = pkg.parent / FILES[0]
    target.unlink()
    target.symlink_to(victim)
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "keep me\n"


def test_a_conflict_changes_nothing_at_all(pkg, capsys):
    # one patch applies, the other conflicts: all or none, so none
    edited = pkg.parent / "sglang/srt/models/deepseek_v2.py"
    text = edited.read_text()
    edited.write_text(text.replace("we plus 1 here because", "we add 1 here because", 1))
    before = sources(pkg)
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 1
    assert "nothing was changed" in capsys.readouterr().err
    assert sources(pkg) == before
    assert not (pkg / patches.BACKUP_DIR).exists()


def test_failed_rollback_is_a_clear_message(pkg, capsys):
    tgt = patches.target(pkg)
    txn = patches.Transaction(tgt.pkg, tgt.pkg / patches.BACKUP_DIR)
    txn.begin("apply", FILES, [])
    for f in txn.saved.rglob("*.py"):  # the saved copies are gone: nothing to restore
        f.unlink()
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 1
    err = capsys.readouterr().err
    assert "rolling back an interrupted `patches apply`" in err and "by hand" in err
    assert "Traceback" not in err


def test_unknown_release_exits_2(pkg, capsys):
    for action in ("check", "apply", "revert"):
        code = patches_main([action, "--sglang-dir", str(pkg), "--sglang-version", "9.9.9"])
        assert code == 2
        assert "9.9.9: not a release this project knows" in capsys.readouterr().err


def _journal(pkg, entry) -> None:
    backup = pkg / patches.BACKUP_DIR
    backup.mkdir(exist_ok=True)
    (backup / transaction.JOURNAL).write_text(json.dumps(entry))


def test_a_linked_txn_folder_is_refused(pkg, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (pkg / patches.BACKUP_DIR).mkdir()
    (pkg / patches.BACKUP_DIR / transaction.SAVED).symlink_to(outside)
    before = sources(pkg)
    assert patches_main(["apply", "--sglang-dir", str(pkg)]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "Traceback" not in err
    assert sources(pkg) == before and not any(outside.iterdir())


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"op": "apply", "stage": "saving", "files": [], "patches": ["../../../../X"]}, "patch id"),
        ({"op": "revert", "stage": "changing", "files": ["/etc/passwd"], "patches": []}, "file"),
        ({"op": "apply", "stage": "changing", "files": ["sglang/../../x"], "patches": []}, "file"),
        ({"op": "apply", "stage": "changing", "files": [1], "patches": []}, "file"),
        ({"op": "rm -rf", "stage": "changing", "files": [], "patches": []}, "op"),
        (["not", "an", "object"], "object"),
    ],
)
def test_a_hostile_journal_is_refused_never_acted_on(pkg, tmp_path, capsys, entry, words):
    victim = tmp_path / "X"
    victim.mkdir()
    (victim / "keep").write_text("keep me")
    _journal(pkg, entry)
    before = sources(pkg)
    for action in ("apply", "revert", "check"):
        assert patches_main([action, "--sglang-dir", str(pkg)]) == 1
        err = capsys.readouterr().err
        assert "not a journal this tool wrote" in err and words in err, err
        assert "Traceback" not in err and err.count("error:") == 1
    assert sources(pkg) == before and (victim / "keep").read_text() == "keep me"


def test_journal_debris_and_a_revert_killed_while_dropping_backups(pkg):
    run_forked(["apply", "--sglang-dir", str(pkg)], None)
    backup = pkg / patches.BACKUP_DIR
    ids = sorted(p.name for p in backup.iterdir() if p.is_dir())
    assert ids
    run_forked(["revert", "--sglang-dir", str(pkg)], None)
    pristine = sources(pkg)
    run_forked(["apply", "--sglang-dir", str(pkg)], None)
    patched = sources(pkg)
    # a revert whose changes went through, killed while dropping the backups
    tgt = patches.target(pkg)
    for p in patches.for_release(tgt.version):
        patches.gnu_patch.run(p.diff(tgt.version), tgt.root, reverse=True, dry_run=False)
    assert sources(pkg) == pristine
    _journal(pkg, {"op": "revert", "stage": "committing", "files": [], "patches": ids})
    (backup / f".{transaction.JOURNAL}.tmp-12345").write_text("{")
    run_forked(["revert", "--sglang-dir", str(pkg)], None)
    assert sources(pkg) == pristine and not backup.exists()  # finished, not undone
    assert patched != pristine


def test_parallel_applies_keep_every_backup(pkg):
    pids = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            try:
                code = patches_main(["apply", "--sglang-dir", str(pkg)])
            except BaseException:
                code = 99
            os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
    assert codes == [0, 0, 0, 0]
    backup = pkg / patches.BACKUP_DIR
    tgt = patches.target(pkg)
    for p in patches.for_release(tgt.version):
        for rel in p.files:
            assert (backup / p.id / rel).is_file(), (p.id, rel)
    assert not (backup / transaction.JOURNAL).exists()
    assert not list(backup.glob(".*.tmp-*"))
