"""The warm probe (the client launcher/preflight/probe_server.py, the suite's broker
tests/probe_broker.py): SGLang's own answers, from a fork.

The suite runs every preflight probe through one broker (tests/conftest.py); these
tests hold that what a warm process answers is what the one-off subprocess answers,
that a python which cannot serve falls back to the subprocess, that no secret reaches
a warm process, that one which ended is started again, that the broker keeps at most
max_warm of them, and that the warm processes end with their broker.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile

import psutil
import pytest

from sgl_eagle_ext.launcher.preflight import ask_sglang, probe_cache, probe_server
from tests.conftest import wait_until
from tests.probe_broker import Broker

pytestmark = pytest.mark.harness  # asks the harness's SGLang 0.5.23
CANARY = "CANARY-probe-server-7d1"


def launches(tiny_models, short_draft) -> list[ask_sglang.Launch]:
    """Two launches in the CPU harness's environment: the tiny pair named from the
    models' folder (a relative path), and a draft shorter than its target."""
    env = {**os.environ, "EAGLE_EXT_CPU": "1", "EAGLE_EXT_TEST_TOKEN": CANARY}
    env[probe_cache.BYPASS] = "0"  # asked every time: no answer read from the cache
    argv = ["--model-path", str(tiny_models["target"]), "--device", "cpu", "--port", "30000"]
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2"]
    spec += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
    return [
        ask_sglang.Launch(
            [*argv, *spec, "--speculative-draft-model-path", "draft-mostly"],
            env,
            str(tiny_models["draft-mostly"].parent),
        ),
        ask_sglang.Launch([*argv, *spec, "--speculative-draft-model-path", str(short_draft)], env),
    ]


def comparable(answer: ask_sglang.Answer) -> dict:
    got = dataclasses.asdict(answer)
    got.pop("seconds")
    fields = got["settings"]["fields"]
    assert isinstance(fields.pop("random_seed"), int)  # SGLang draws it afresh per process
    got["settings"]["changes"] = [
        c for c in got["settings"]["changes"] if c["field"] != "random_seed"
    ]
    return got


def probe_runs(monkeypatch) -> list[list[str]]:
    """The one-off probe subprocesses started from now on (their command lines)."""
    runs: list[list[str]] = []
    real = ask_sglang.proctree.run_in_group

    def spy(cmd, *a, **k):
        if str(ask_sglang.PROBE) in cmd:
            runs.append(list(cmd))
        return real(cmd, *a, **k)

    monkeypatch.setattr(ask_sglang.proctree, "run_in_group", spy)
    return runs


def test_a_warm_answer_is_sglangs_own_and_a_python_that_cannot_serve_falls_back(
    tiny_models, short_draft, tmp_path, monkeypatch
):
    asked = launches(tiny_models, short_draft)
    monkeypatch.delenv(probe_server.VAR, raising=False)
    cold = ask_sglang.ask_launches(sys.executable, asked)  # one-off subprocess
    assert [why for _, why in cold] == ["", ""]
    assert [a.draft.get("len") for a, _ in cold] == [2048, 1024]  # SGLang's ModelConfig

    # a short folder: a unix socket's path holds 108 bytes at most
    broker = Broker(tempfile.mkdtemp(prefix="probes-"), max_warm=1).start()
    monkeypatch.setenv(probe_server.VAR, str(broker.folder))
    try:
        # a python whose warm mode fails (here: refused) is asked as a one-off subprocess
        wrapper = tmp_path / "python"
        wrapper.write_text(f'#!/bin/sh\n[ "$2" = --serve ] && exit 3\nexec {sys.executable} "$@"\n')
        wrapper.chmod(0o755)
        runs = probe_runs(monkeypatch)
        fallback = ask_sglang.ask_launches(str(wrapper), asked)
        assert len(runs) == 1 and runs[0][0] == str(wrapper)
        assert [comparable(a) for a, _ in fallback] == [comparable(a) for a, _ in cold]

        # the harness's python: answered by a fork of its warm process, twice (the
        # second from the same process), no subprocess started
        runs.clear()
        warm = ask_sglang.ask_launches(sys.executable, asked)
        again = ask_sglang.ask_launches(sys.executable, asked)
        assert runs == []
        for answers in (warm, again):
            assert [why for _, why in answers] == ["", ""]
            assert [comparable(a) for a, _ in answers] == [comparable(a) for a, _ in cold]
        (process,) = [p for p in broker._procs if p.poll() is None]
        assert CANARY not in "\n".join(psutil.Process(process.pid).environ().values())

        # a warm process that ended (its idle timeout, the OOM killer) is started again
        process.kill()
        process.wait()
        revived = ask_sglang.ask_launches(sys.executable, asked[:1])
        assert runs == [] and [comparable(a) for a, _ in revived] == [comparable(cold[0][0])]
        (process,) = [p for p in broker._procs if p.poll() is None]

        # beyond max_warm, the least recently asked is retired (it exits), and asked
        # again it starts again: the same answer, still no subprocess
        other = dataclasses.replace(asked[0], env={**asked[0].env, "SGLANG_EXT_TEST_ARM": "b"})
        assert [why for _, why in ask_sglang.ask_launches(sys.executable, [other])] == [""]
        wait_until(lambda: process.poll() is not None, 30, "the retired warm process to end")
        back = ask_sglang.ask_launches(sys.executable, asked[:1])
        assert runs == [] and [comparable(a) for a, _ in back] == [comparable(cold[0][0])]
        assert len(broker._procs) == 5  # the refused wrapper, first, revived, other, back
        (process,) = [p for p in broker._procs if p.poll() is None]
    finally:
        broker.close()
    wait_until(lambda: process.poll() is not None, 30, "the warm process to end")
    assert not list(broker.folder.glob("*.sock"))
    shutil.rmtree(broker.folder)
