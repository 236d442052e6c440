"""`python -m sgl_eagle_ext.report --where PHASE [--sglang-version V]`: the phase
table's answer for users (profiling/where.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.profiling import report


def test_where_names_the_methods_of_the_release_table(capsys):
    assert report.main(["--where", "verify_fwd", "--sglang-version", "0.5.23"]) == 0
    out = capsys.readouterr().out.splitlines()
    worker = releases.BY_VERSION["0.5.23"].workers[0]
    assert out[0] == "verify_fwd: the target model's forward over the draft tree"
    assert out[1] == "SGLang 0.5.23:"
    assert out[2] == (
        f"  {worker.worker}: verify_fwd opens at call of {worker.target_forward} with "
        f"is_verify=True; closes at return from {worker.target_forward} with is_verify=True"
    )
    assert len(out) == 3


def test_where_without_a_version_answers_for_every_release_and_worker(capsys):
    assert report.main(["--where", "accept"]) == 0
    out = capsys.readouterr().out
    for r in releases.RELEASES:
        assert f"SGLang {r.version}:" in out
        for w in r.workers:
            assert f"closes at return from {w.verify}" in out
    v1 = releases.BY_VERSION["0.5.10.post1"]
    assert len(v1.workers) == 2  # the old release has both worker generations
    assert sum(line.startswith("  ") for line in out.splitlines()) == sum(
        len(r.workers) for r in releases.RELEASES
    )


@pytest.mark.parametrize(
    "argv, names",
    [
        (["--where", "verify"], "draft, verify_fwd, accept, draft_extend, cycle"),
        (["--where", "draft", "--sglang-version", "0.4.0"], "0.5.10.post1, "),
    ],
    ids=["unknown-phase", "unknown-release"],
)
def test_unknown_phase_or_release_is_one_line_and_exit_2(argv, names):
    done = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.report", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and names in lines[0] and "Traceback" not in done.stderr


def test_logs_are_still_required_without_where(capsys):
    with pytest.raises(SystemExit) as e:
        report.main([])
    assert e.value.code == 2
    assert "logs (or --where PHASE)" in capsys.readouterr().err
