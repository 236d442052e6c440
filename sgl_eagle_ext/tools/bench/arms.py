"""Arms of an A/B or compare run: presets started in turn through the launcher.

Each arm is `python -m sgl_eagle_ext.launch --preset P ...` as a child process
in its own session: wait for its `READY in` line, warm up, sweep every level,
generate the lossless-check outputs, then stop it with SIGTERM (the launcher
stops the whole server tree) before the next arm starts. Every arm gets the same
prompts in the same seeded order, the same lengths and levels.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import ports, proctree
from sgl_eagle_ext.common.contract import API_KEY_ENV
from sgl_eagle_ext.common.errors import EXIT_USAGE
from sgl_eagle_ext.launcher import fairness
from sgl_eagle_ext.launcher import plan as launch_plan
from sgl_eagle_ext.tools.bench import provenance

READY = re.compile(r"READY in [\d.]+ s: (\S+)")
STOP_TIMEOUT = 120.0


class ArmFailed(Exception):
    def __init__(self, message: str, launcher_code: int | None = None, kind: str | None = None):
        super().__init__(message)
        # 2: the launcher refused its input (bad preset, path, flag): the command's
        # exit is 2 as well, not a server failure
        self.code = EXIT_USAGE if launcher_code == EXIT_USAGE else None
        # for the record: refused (its input), exited (before READY), not_ready (timeout)
        self.kind = kind or ("refused" if self.code == EXIT_USAGE else "exited")


def free_port() -> int:
    return ports.pick()  # outside the ephemeral range (common/ports.py)


@dataclass
class ArmPlan:
    label: str  # "A", "B", ...
    preset: str
    launch_args: list[str]  # arguments of `python -m sgl_eagle_ext.launch`
    facts: dict = field(default_factory=dict)  # provenance: preset, args, env
    # the servers' key: handed to the launcher in its environment, never on its command line
    api_key: str | None = field(default=None, repr=False)
    secret_env: dict = field(default_factory=dict, repr=False)  # EAGLE_EXT_ADMIN_API_KEY...
    launch: launch_plan.LaunchPlan | None = field(default=None, repr=False)  # what it runs

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "sgl_eagle_ext.launch", *self.launch_args]


def plan_arm(
    label: str,
    preset: str,
    *,
    cpu: bool,
    model_path: str | None,
    draft_model_path: str | None,
    sglang_version: str | None,
    force: bool,
    port: int,
    log_file: Path,
    extra: list[str],
    overlays: list[str] | None = None,
) -> ArmPlan:
    """The launcher command for one arm and the exact server args/env it will use
    (launcher/plan.py build): bad input fails here, before any server starts."""
    is_file = preset.endswith(".toml") or os.sep in preset
    server_extra = ["--port", str(port), *extra]
    request = launch_plan.LaunchRequest(
        preset=None if is_file else preset,
        preset_file=preset if is_file else None,
        model_path=model_path,
        draft_model_path=draft_model_path,
        overlays=tuple(overlays or ()),
        cpu=cpu,
        sglang_version=sglang_version,
        force=force,
        extra=tuple(server_extra),
    )
    plan = launch_plan.build(request)
    p, release, how, env = plan.preset, plan.release, plan.how, plan.env
    ours = launcher_args(request, plan)
    server_args = list(plan.argv)
    facts = {
        "preset": p.name,
        "preset_chain": p.chain,
        "preset_description": p.description,
        "sglang_rules": f"{release.version} ({how})",
        "args": provenance.redact_args(server_args),
        "preset_env": provenance.redact_env(env, keep_all=True),
        "env": provenance.redact_env({**os.environ, **env}),
        "launch_command": provenance.redact_args(
            [
                "python",
                "-m",
                "sgl_eagle_ext.launch",
                *ours,
                "--log-file",
                str(log_file),
                "--quiet",
                "--no-spec-check",
                "--",
                *server_extra,
            ]
        ),
        "log_file": str(log_file),
    }
    args = [*ours, "--log-file", str(log_file), "--quiet", "--no-spec-check", "--", *server_extra]
    return ArmPlan(label, p.name.split("+")[0], args, facts, launch=plan)


def check_fair(plans: list[ArmPlan], allow_unequal: bool, say) -> fairness.Verdict | None:
    """Before any server starts: the arms' resolved settings differ only in speculation
    (launcher/fairness.py), else UserError (exit 2) unless allow_unequal. Prints the
    verdict's lines with `say`; the caller records verdict.record() beside its figures.
    None: an arm without a launch plan (a test's stand-in server), nothing to resolve."""
    if any(p.launch is None for p in plans):
        return None
    names = [p.preset for p in plans]
    keys = names if len(set(names)) == len(names) else [p.label for p in plans]
    verdict = fairness.check(dict(zip(keys, (p.launch for p in plans), strict=True)), allow_unequal)
    for line in verdict.lines():
        say(line)
    return verdict


def launcher_args(request: launch_plan.LaunchRequest, plan: launch_plan.LaunchPlan) -> list[str]:
    """`python -m sgl_eagle_ext.launch` arguments (before `--`) for `request`."""
    ours = ["--preset-file", str(request.preset_file)] if request.preset_file else []
    ours = ours or ["--preset", str(request.preset)]
    for name in request.overlays:
        ours += ["--overlay", name]
    if request.cpu:
        ours.append("--cpu")
    if request.model_path:
        ours += ["--model-path", request.model_path]
    if request.draft_model_path and plan.preset.speculative:
        ours += ["--draft-model-path", request.draft_model_path]
    if request.sglang_version:
        ours += ["--sglang-version", request.sglang_version]
    if request.force:
        ours.append("--force")
    return ours


class LauncherProcess:
    """One arm's launcher: start, wait for READY, stop with SIGTERM."""

    def __init__(self, plan: ArmPlan):
        self.plan = plan
        self.lines: deque[str] = deque(maxlen=400)
        self.url: str | None = None
        # Own session: a Ctrl-C at the terminal is ours to handle (finish, record, then
        # stop the arm). Parent-death signal: should this process be killed, the launcher
        # gets SIGTERM and stops its server tree instead of leaving it running.
        self.proc = subprocess.Popen(
            plan.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=proctree.die_with_parent,
            env={
                **os.environ,
                **plan.secret_env,
                **({API_KEY_ENV: plan.api_key} if plan.api_key else {}),
            },
        )
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            m = READY.search(line)
            if m and not self._ready.is_set():
                self.url = m.group(1)
                self._ready.set()

    def tail(self, n: int = 12) -> str:
        return "\n  ".join(list(self.lines)[-n:])

    def wait_ready(self, timeout: float) -> str:
        t0 = time.monotonic()
        while not self._ready.wait(0.5):
            if self.proc.poll() is not None:
                time.sleep(0.3)
                if self._ready.is_set():
                    break
                raise ArmFailed(
                    f"preset {self.plan.preset}: the launcher exited with code "
                    f"{self.proc.returncode} before READY:\n  {self.tail()}",
                    self.proc.returncode,
                )
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise ArmFailed(
                    f"preset {self.plan.preset}: not READY after {timeout:.0f} s:\n  {self.tail()}",
                    kind="not_ready",
                )
        return self.url

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM (the launcher stops its server tree); SIGKILL the group if it hangs."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(10)
        return self.proc.returncode

    @property
    def stopped_cleanly(self) -> bool:
        return self.proc.returncode in (0, 128 + signal.SIGTERM)
