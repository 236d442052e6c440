"""Arms of an A/B or compare run: presets started in turn through the launcher.

Each arm's server is started in this process from its typed launch plan
(launcher/running.py: the launcher's own checks, preflight, NCCL lines, readiness),
no `python -m sgl_eagle_ext.launch` child and no READY line read from its output:
wait until ready, warm up, sweep every level, generate the lossless-check outputs,
then stop the whole server tree before the next arm starts. Every arm gets the same
prompts in the same seeded order, the same lengths and levels.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import interrupts, secret_flags
from sgl_eagle_ext.common.cli_args import show_seconds
from sgl_eagle_ext.common.errors import EXIT_USAGE, UserError
from sgl_eagle_ext.common.server_flags import ServerFlags
from sgl_eagle_ext.common.server_process import StartupFailed
from sgl_eagle_ext.launcher import fairness, running
from sgl_eagle_ext.launcher import plan as launch_plan
from sgl_eagle_ext.tools.bench import provenance

STOP_GRACE = 60.0  # SIGTERM to the server, then SIGKILL to what is left of its tree


class ArmFailed(Exception):
    def __init__(self, message: str, launcher_code: int | None = None, kind: str | None = None):
        super().__init__(message)
        # 2: the launcher refused its input (bad preset, path, flag): the command's
        # exit is 2 as well, not a server failure
        self.code = EXIT_USAGE if launcher_code == EXIT_USAGE else None
        # for the record: refused (its input), exited (before READY), not_ready (timeout)
        self.kind = kind or ("refused" if self.code == EXIT_USAGE else "exited")


@dataclass
class ArmPlan:
    label: str  # "A", "B", ...
    preset: str
    launch_args: list[str]  # the same launch as `python -m sgl_eagle_ext.launch` arguments
    facts: dict = field(default_factory=dict)  # provenance: preset, args, env
    # the servers' key: in the server's environment, never on its command line
    api_key: str | None = field(default=None, repr=False)
    secret_env: dict = field(default_factory=dict, repr=False)  # EAGLE_EXT_ADMIN_API_KEY...
    launch: launch_plan.LaunchPlan | None = field(default=None, repr=False)  # what starts
    log_file: Path | None = None

    @property
    def command(self) -> list[str]:
        """The equivalent launcher command (for people: the arm starts in process)."""
        return [sys.executable, "-m", "sgl_eagle_ext.launch", *self.launch_args]


def plan_arm(
    label: str,
    preset: str,
    *,
    server: ServerFlags,
    port: int,
    log_file: Path,
    extra: list[str],
) -> ArmPlan:
    """The launcher command for one arm and the exact server args/env it will use
    (launcher/plan.py build): bad input fails here, before any server starts."""
    is_file = preset.endswith(".toml") or os.sep in preset
    server_extra = ["--port", str(port), *extra]
    request = launch_plan.LaunchRequest(
        preset=None if is_file else preset,
        preset_file=preset if is_file else None,
        model_path=server.model_path,
        draft_model_path=server.draft_model_path,
        overlays=tuple(server.overlays),
        cpu=server.cpu,
        sglang_version=server.sglang_version,
        force=server.force,
        extra=tuple(server_extra),
    )
    plan = launch_plan.build(request)
    p, release, how, env = plan.preset, plan.release, plan.how, plan.env
    ours = launcher_args(request, plan)
    server_args = list(plan.argv)
    args = [*ours, "--log-file", str(log_file), "--quiet", "--no-spec-check", "--", *server_extra]
    facts = {
        "preset": p.name,
        "preset_chain": p.chain,
        "preset_description": p.description,
        "sglang_rules": f"{release.version} ({how})",
        "args": provenance.redact_args(server_args),
        "preset_env": provenance.redact_env(env, keep_all=True),
        "env": provenance.redact_env({**os.environ, **env}),
        "launch_command": provenance.redact_args(["python", "-m", "sgl_eagle_ext.launch", *args]),
        "log_file": str(log_file),
    }
    return ArmPlan(label, p.name.split("+")[0], args, facts, launch=plan, log_file=log_file)


def check_fair(plans: list[ArmPlan], allow_unequal: bool, say) -> fairness.Verdict | None:
    """Before any server starts: the arms' resolved settings differ only in speculation
    (launcher/fairness.py), else UserError (exit 2) unless allow_unequal. Prints the
    verdict's lines with `say`; the caller records verdict.record() beside its figures.
    None: an arm without a launch plan (a test's stand-in server), nothing to resolve."""
    if any(p.launch is None for p in plans):
        return None
    for flag, path in {(f, v) for p in plans for f, v in running.model_paths(p.launch) if v}:
        running.check_model_dir(flag, path)  # once, before any arm starts
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
    """One arm's server, started in this process (launcher/running.py) in a thread, so
    the caller can show its startup phases and stop it at any moment: start, wait until
    ready, stop the whole tree."""

    def __init__(self, plan: ArmPlan):
        self.plan = plan
        self.lines: deque[str] = deque(maxlen=400)  # what the start said (preflight...)
        self.url: str | None = None
        self.error: BaseException | None = None
        self.left: set[int] | None = None  # PIDs alive after stop() (None: not stopped)
        self._starting: running.Starting | None = None
        self._stop_asked = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._release = threading.Event()  # set by stop(): the starting thread may end
        threading.Thread(target=self._start, name=f"arm-{plan.label}", daemon=True).start()

    @property
    def tls(self):
        """How the launcher trusts its server (SGLang's own --ssl-certfile, pinned), or
        None (plain http, or not started)."""
        return self._starting.tls if self._starting is not None else None

    def _say(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def _options(self) -> running.StartOptions:
        # as the launcher gathers them: our EAGLE_EXT_* variables, then the arm's own
        secrets = {
            **secret_flags.from_environment(os.environ),
            **secret_flags.from_environment(self.plan.secret_env),
        }
        if self.plan.api_key:
            secrets["api-key"] = self.plan.api_key
        return running.StartOptions(
            log_path=self.plan.log_file or Path("logs") / f"arm-{self.plan.label}.log",
            secrets=secrets,
            say=self._say,
        )

    def _start(self) -> None:
        p = self.plan
        try:
            starting = running.launch(p.launch, self._options())
            with self._lock:
                stop_now, self._starting = self._stop_asked, starting
            if stop_now:  # stop() came while preflight ran
                self.left = starting.stop()
                return
            server = starting.wait()
            self.url = server.url
            table, warnings = server.nccl_table()  # what the launcher would have printed
            self._say(table)
            for w in warnings:
                self._say(f"warning: NCCL: {w}")
            self._done.set()
            # The server's parent-death signal follows the thread that started it (Linux:
            # PR_SET_PDEATHSIG is per thread): this thread lives until stop().
            self._release.wait()
        except UserError as e:  # the launcher's refusal (code 2: its input; the run exits 2)
            self.error = ArmFailed(
                f"preset {p.preset}: {e.message}" + (f" ({e.fix})" if e.fix else ""),
                e.code,
            )
        except StartupFailed as e:
            self.error = ArmFailed(f"preset {p.preset}: {e}")
        except BaseException as e:  # the thread's failure goes to the caller
            self.error = ArmFailed(f"preset {p.preset}: {type(e).__name__}: {e}")
        finally:
            self._done.set()

    def tail(self, n: int = 12) -> str:
        server = self._starting.server.tail if self._starting else []
        return "\n  ".join([*self.lines, *server][-n:])

    def wait_ready(self, timeout: float | None) -> str:
        if timeout is None:  # the launcher's own estimate for this launch (its states)
            timeout = running.default_startup_timeout(self.plan.launch)
        if not interrupts.wait(self._done, timeout or None):  # a signal stops the wait
            self.stop()
            raise ArmFailed(
                f"preset {self.plan.preset}: not ready after {show_seconds(timeout)}:\n  "
                f"{self.tail()}",
                kind="not_ready",
            )
        if self.error is not None:
            raise self.error
        return self.url

    @property
    def api_key(self) -> str | None:
        """The key the server was started with (`-- --api-key K`, EAGLE_EXT_API_KEY ...):
        whoever sends it requests needs it."""
        return self._starting.api_key if self._starting else None

    @property
    def proc(self):
        """The server's process (its pid: the root of the arm's tree)."""
        return self._starting.server.proc if self._starting else None

    def alive(self) -> bool:
        return self._starting is not None and self._starting.server.alive()

    def stop(self) -> int | None:
        """The whole server tree stopped (SIGTERM, then SIGKILL for what is left); the
        server process's exit code."""
        with self._lock:
            self._stop_asked = True
            starting = self._starting
        try:
            if starting is None:
                return None
            if self.left is None:
                self.left = starting.stop(STOP_GRACE)
            return starting.server.returncode()
        finally:
            self._release.set()

    @property
    def stopped_cleanly(self) -> bool:
        """Nothing of the server's tree was left after stop()."""
        return self.left is not None and not self.left
