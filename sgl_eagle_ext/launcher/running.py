"""launcher.start(plan) -> RunningServer: a server started in this process from the typed
launch plan (launcher/plan.py), without the argv round trip of `python -m
sgl_eagle_ext.launch` and without reading its stdout for READY. The launcher's own command
line starts its server the same way (prepare(), then begin() and wait() inside its
Ctrl-C supervision), as do bench ab/compare, tune --live, the demo and benchmarks/.

What start() does, in the launcher's order: the model folders checked, the port free,
preflight (unless switched off; its retargeting applied to the plan), the server process
(its own session, parent-death signal, log file, secrets only in its environment), the
NCCL line of every rank collected, the port-taken watch, and readiness that cannot be
fooled (launcher/readiness.py). A failed start stops the whole tree before it raises
StartupFailed (its `code` is the launcher's exit code). RunningServer.stop() stops the
whole tree (profiles flushed first, common/server_process.py).

Used as a context manager, the server is stopped however the block is left:

    launch = plan.build(plan.LaunchRequest(preset="eagle3-2step", model_path=M, ...))
    with running.start(launch, running.StartOptions(log_path=Path("logs/a.log"))) as srv:
        http.generate(srv.url, prompts, 64, api_key=srv.api_key, tls=srv.tls)
"""

from __future__ import annotations

import os
import re
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import http, interrupts, nccl_line, secret_flags
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.server_process import ServerProcess, StartupFailed
from sgl_eagle_ext.launcher import bind_watch, nccl, plan, readiness, runtime_states

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # org/name: SGLang downloads it


@dataclass(frozen=True)
class StartOptions:
    log_path: Path
    preflight: bool = True
    fix: bool = False  # preflight: launch on a draft overlay that fixes the context length
    skip: tuple[str, ...] = ()  # preflight findings waived
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)  # {"api-key": ...}
    echo: bool = False  # the server log to this process's stdout too
    stall_timeout: float = 900.0  # the launcher's defaults (launcher/cli.py)
    startup_timeout: float = 0.0
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    prog: str = "sgl_eagle_ext.launch"  # names the preflight's lines
    # the server's environment only, after preflight, not expected of the ranks' NCCL
    # (--nccl-debug's variables)
    extra_env: Mapping[str, str] = field(default_factory=dict)


class NcclReports:
    """Collects each rank's NCCL line (common/nccl_line.py) from the server output."""

    def __init__(self):
        self.ranks: dict[str, dict[str, str]] = {}

    def __call__(self, line: str) -> None:
        parsed = nccl_line.parse_line(line)
        if parsed:
            self.ranks[parsed[0]] = parsed[1]


class RunningServer:
    """A ready server started by start(): its URL, log, NCCL reports, process tree."""

    def __init__(
        self, launch, server, url, api_key, nccl_reports, startup_s, expected_nccl, tls=None
    ):
        self.launch: plan.LaunchPlan = launch
        self.tls = tls  # the https context its clients use (None: plain HTTP)
        self.server: ServerProcess = server
        self.url: str = url
        self.api_key: str | None = api_key
        self.nccl: dict[str, dict[str, str]] = nccl_reports.ranks
        self.startup_s: float = startup_s
        self.expected_nccl: dict[str, str] = expected_nccl

    @property
    def log_path(self) -> Path:
        return self.server.log_path

    @property
    def pid(self) -> int:
        return self.server.pid

    def alive(self) -> bool:
        return self.server.alive()

    def returncode(self) -> int | None:
        return self.server.returncode()

    def tail(self, n: int = 12) -> list[str]:
        return list(self.server.tail)[-n:]

    def nccl_table(self) -> tuple[str, list[str]]:
        """The launcher's rank x variable table, and its warnings."""
        return nccl.table(self.nccl, self.expected_nccl)

    def stop(self, grace: float = 20.0) -> set[int]:
        """Stop the whole tree; the PIDs still alive afterwards (none expected)."""
        return self.server.stop(grace)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def default_startup_timeout(launch: plan.LaunchPlan) -> float:
    """The launcher's --startup-timeout default for this launch: weights, JIT and the
    capture of each speculative runtime state it builds."""
    states = runtime_states.for_release(launch.argv, launch.release)
    return readiness.default_startup_timeout(len(states.states) if states else 1)


def model_paths(launch: plan.LaunchPlan) -> tuple[tuple[str, str | None], ...]:
    """(SGLang's flag, path) of the launch's target and draft (None: not given)."""
    return (
        ("--model-path", launch.model_path),
        ("--speculative-draft-model-path", launch.draft_model_path),
    )


def check_model_dir(flag: str, path: str) -> None:
    try:
        _check_model_dir(flag, path)
    except OSError as e:  # e.g. a directory this user may not read
        raise UserError(
            f"{flag} {path}: cannot be read ({e.strerror or e}).",
            fix="check the directory's permissions (the server must read config.json and "
            "the weights)",
        ) from None


def _check_model_dir(flag: str, path: str) -> None:
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise UserError(
                f"{flag} {path}: the directory has no config.json.",
                fix="point it at the model directory itself (config.json, weights)",
            )
        return
    if p.exists():
        raise UserError(
            f"{flag} {path}: not a directory.", fix="give the model directory, not a file inside it"
        )
    if HUB_ID.match(path) and not path.startswith((".", "/", "~")):
        return  # a Hugging Face id: SGLang downloads it
    raise UserError(
        f"{flag} {path}: no such directory.",
        fix="check the path (the directory holding config.json and the weights)",
    )


def preflight(
    launch: plan.LaunchPlan,
    env: Mapping[str, str],
    *,
    fix: bool = False,
    skip: Sequence[str] = (),
    say: Callable[[str], None],
    prog: str = "sgl_eagle_ext.launch",
) -> plan.LaunchPlan:
    """Preflight before anything starts (UserError when it finds errors); the plan with
    the (possibly retargeted) arguments."""
    from sgl_eagle_ext.launcher import preflight as checks

    report = checks.run(
        launch.model_path,
        launch.draft_model_path,
        launch.release,
        launch.argv,
        fix=fix,
        skip=[*skip, "host.port"],
        env={**os.environ, **env},
        hardware=launch.preset.hardware or None,
    )
    say(report.render(notes=False))
    for f in report.findings:  # whose verdicts these are (SGLang's own, or the rules')
        if f.id in ("sglang.asked", "sglang.dry-run", "adaptive.runtime-states"):
            say(f"{prog}: preflight: {f.message}")
    if not report.ok:
        raise UserError(
            "preflight found errors (listed above); nothing was started.",
            fix="apply a fix shown above, or pass --skip ID to waive a finding",
        )
    return launch.with_argv(report.retarget(list(launch.argv)))


def server_env(launch: plan.LaunchPlan, secrets: Mapping[str, str]) -> tuple[dict, dict]:
    """(the server's environment beyond ours, every secret flag): secrets travel in the
    environment, never on a command line."""
    every = {**secrets, **launch.secrets}
    env = dict(launch.env)
    env.update(secret_flags.to_environment(every))
    return env, every


class Starting:
    """A server whose process runs but is not ready yet (launch()); wait() makes it a
    RunningServer, stop() ends it (from another thread too). The server gets SIGTERM
    when the THREAD that called launch() ends (Linux's parent-death signal follows the
    thread): call it from a thread that outlives the server."""

    def __init__(self, launch, options, server, bind, reports, url, api_key, env, tls=None):
        self.launch, self.options, self.server = launch, options, server
        self._bind, self._reports, self.url, self.api_key = bind, reports, url, api_key
        self._env, self.tls = env, tls

    def begin(self) -> Starting:
        """Start the server process (the port-taken watch armed first)."""
        self._bind.arm(self.server)
        self.server.start()
        return self

    def wait(self, tail: bool = True) -> RunningServer:
        """Block until ready (readiness.wait_ready); on any failure the tree is stopped
        first, then the error raised (StartupFailed: with the log's last lines, unless
        `tail` is False: the launcher prints them itself)."""
        try:
            took = readiness.wait_ready(
                self.server,
                self.url,
                self.launch.port,
                api_key=self.api_key,
                tls=self.tls,
                stall_timeout=self.options.stall_timeout,
                startup_timeout=self.options.startup_timeout,
            )
            self._bind.check()
        except BaseException as e:  # StartupFailed, Ctrl-C while it loads: the tree first
            self.server.stop()  # (its log reader finished: the tail is complete)
            if tail and isinstance(e, StartupFailed):
                lines = "\n  ".join(list(self.server.tail)[-8:])
                e.args = (f"{e.args[0]}; last log lines:\n  {lines}" if lines else e.args[0],)
            raise
        return RunningServer(
            self.launch,
            self.server,
            self.url,
            self.api_key,
            self._reports,
            took,
            nccl.expected(self._env),
            self.tls,
        )

    def stop(self, grace: float = 20.0) -> set[int]:
        return self.server.stop(grace)


def prepare(
    launch: plan.LaunchPlan,
    options: StartOptions,
    *,
    command: Sequence[str] | None = None,
) -> Starting:
    """Everything before the process starts: the checks, preflight, the server process
    built (Starting.begin() starts it)."""
    env, secrets = server_env(launch, options.secrets)
    api_key = secrets.get("api-key")
    for flag, value in model_paths(launch):
        if value and command is None:
            check_model_dir(flag, value)
    host, port = launch.host, launch.port
    http.check_port_free(host, port)
    if options.preflight:
        launch = preflight(
            launch, env, fix=options.fix, skip=options.skip, say=options.say, prog=options.prog
        )
    reports = NcclReports()
    bind = bind_watch.BindWatch(port)
    states = runtime_states.for_release(launch.argv, launch.release)  # speculative ones
    server = ServerProcess(
        list(command or launch.command()),
        {**os.environ, **env, **options.extra_env},
        options.log_path,
        redact=list(secrets.values()),
        echo=options.echo,
        listeners=[reports, bind],
        adaptive_states=states.extra_states if states and states.extra_states else None,
    )
    # https:// when SGLang serves TLS (its own rule: --ssl-certfile), polled trusting
    # exactly the certificate it was given (a self-signed one, named for another host)
    url = f"{launch.argv.scheme}://{http.probe_host(host)}:{port}"
    cert = launch.argv.tls_certfile
    try:
        tls = http.tls_context(cafile=cert, pinned=True) if cert else None
    except (OSError, ssl.SSLError) as e:
        raise UserError(
            f"--ssl-certfile {cert}: not a readable PEM certificate "
            f"({getattr(e, 'strerror', None) or getattr(e, 'reason', None) or e}).",
            fix="give SGLang the server's certificate in PEM (and its key with --ssl-keyfile)",
        ) from None
    return Starting(launch, options, server, bind, reports, url, api_key, env, tls)


def launch(
    launch: plan.LaunchPlan,
    options: StartOptions,
    *,
    command: Sequence[str] | None = None,
) -> Starting:
    """Everything before the wait: the checks, preflight, the server process started."""
    return prepare(launch, options, command=command).begin()


def start(
    launch_plan: plan.LaunchPlan,
    options: StartOptions,
    *,
    command: Sequence[str] | None = None,
) -> RunningServer:
    """Start the server of `launch_plan` and wait until it is ready (see the module's
    text). `command`: another server command for the same plan (tests: a stand-in)."""
    return launch(launch_plan, options, command=command).wait()


def start_or_exit(launch_plan: plan.LaunchPlan, log_path: Path, what: str) -> RunningServer:
    """start() for a script (benchmarks/): preflight's report held back and printed only
    if the start fails, which ends the script with one line naming `what` and the log."""
    said: list[str] = []
    options = StartOptions(
        log_path=log_path,
        startup_timeout=default_startup_timeout(launch_plan),
        say=said.append,
    )
    try:
        return start(launch_plan, options)
    except (UserError, StartupFailed) as e:
        print("\n".join(said), file=sys.stderr)
        raise SystemExit(f"{what} did not start: {e}; see {log_path}") from None


def script_main(main: Callable[[], int | None]) -> int:
    """A benchmark script's entry (benchmarks/ that start servers with start_or_exit):
    a `kill` (SIGTERM, SIGHUP, ...) stops it as Ctrl-C does, so every server it started
    is stopped on the way out (their `with` blocks) instead of left running."""
    try:
        with interrupts.sigterm_as_sigint():
            return main() or 0
    except KeyboardInterrupt:
        print("\ninterrupted: the servers this run started are stopped", file=sys.stderr)
        return 130
