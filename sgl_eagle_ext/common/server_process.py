"""The SGLang server as a child process: start, log tee, startup phase, stop the tree.

The server runs in its own session (process group) with a parent-death signal,
so it can be stopped as a whole and cannot outlive the launcher. SGLang's own
scheduler and detokenizer processes die with the server process
(`kill_itself_when_parent_died`), and `stop()` also walks the tree with psutil.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import psutil

from sgl_eagle_ext.common import contract, jit_watch, proctree, startup_phase
from sgl_eagle_ext.common.redaction import redact_text

# Startup phases (common/startup_phase.py); PHASES stays importable from here.
PHASES = startup_phase.PHASES
LINE_END = re.compile(rb"[\r\n]")


# Exit codes of the launcher and the router (README and docs/launcher.md: exit codes); Stopped: 128+signal.
EXIT_SERVER_FAILED = 1
EXIT_WATCHDOG = 3
BUILD_RECENT_S = 10.0  # a build seen this recently is named in the phase


class StartupFailed(Exception):
    """The child did not get ready: it exited, stalled, or something else holds its port."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class Stopped(Exception):
    """A terminating signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, ...) arrived while
    supervising a child process."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.code = 128 + signum  # the shell's convention for "killed by signal N"


def _raise_stopped(signum, _frame):
    raise Stopped(signum)


# Every signal whose default action ends the process: each one stops the tree first.
# Only INT and TERM were handled: a SIGHUP (a closed terminal) or SIGQUIT (Ctrl-\)
# killed the launcher and left SGLang's scheduler and detokenizer re-parented to init.
TERMINATING = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
)
ALWAYS = (signal.SIGINT, signal.SIGTERM)  # the others stay ignored if so at start (nohup)


def _handled() -> list[int]:
    return [s for s in TERMINATING if s in ALWAYS or signal.getsignal(s) != signal.SIG_IGN]


@contextmanager
def supervised(child: ServerProcess, prog: str):
    """Inside: every terminating signal (TERMINATING) raises Stopped. On the way out,
    however it is left, the child's whole process tree is stopped, with further
    signals ignored meanwhile so a second Ctrl-C cannot leave orphans."""
    old = {s: signal.signal(s, _raise_stopped) for s in _handled()}
    try:
        yield child
    finally:
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        try:
            left = child.stop()
            if left:
                print(f"{prog}: warning: processes still alive: {sorted(left)}", file=sys.stderr)
        finally:  # never leave the caller with Ctrl-C ignored
            for s, h in old.items():
                signal.signal(s, h)


def run_supervised(child: ServerProcess, prog: str, what: str, body: Callable[[], int]) -> int:
    """body()'s exit code, with `child` supervised (see supervised()): a StartupFailed
    prints the error and the child's last log lines, a terminating signal (Stopped)
    one line; either way the child's whole tree is stopped and the error's code returned."""
    with supervised(child, prog):
        try:
            return body()
        except StartupFailed as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            child.print_tail(prog, what)
            print(f"{prog}: stopping the {what} process tree", file=sys.stderr, flush=True)
            return e.code
        except Stopped as e:
            print(f"\n{prog}: {e}: stopping the {what} process tree", file=sys.stderr, flush=True)
            return e.code


def serve_until_exit(child: ServerProcess, prog: str, what: str) -> int:
    """After READY: wait for the child to end; it was meant to run until stopped."""
    while child.alive():
        time.sleep(0.5)
    print(f"{prog}: the {what} exited with code {child.returncode()}", file=sys.stderr)
    return EXIT_SERVER_FAILED


class ServerProcess:
    def __init__(
        self,
        cmd: list[str],
        env: dict[str, str],
        log_path: Path,
        redact: list[str] | None = None,
        echo: bool = True,
        listeners=(),
        adaptive_states: int | None = None,
    ):
        self.cmd = cmd
        self.env = env
        self.log_path = log_path
        self.redact = [s for s in (redact or []) if s]
        self.echo = echo
        self.listeners = list(listeners)  # called with every log line (reader thread)
        self.proc: subprocess.Popen | None = None
        # adaptive_states: the extra runtime states an adaptive launch builds (phase names)
        self._phase = startup_phase.StartupPhase(adaptive_states)
        self.last_progress = time.monotonic()
        self.probe_lines = 0  # lines our own health polls caused (never progress)
        self.tail: deque[str] = deque(maxlen=40)
        self._reader: threading.Thread | None = None
        self.log_error = ""
        self.builds: jit_watch.BuildWatch | None = None  # made at start (the env's caches)
        self.build_note = ""  # the last JIT build seen (jit_watch), named in the phase
        self.build_seen_at: float | None = None

    # -- life cycle -------------------------------------------------------
    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The caches' scan (slow on a big cache) comes before the fork: a signal
        # handled during it then finds no child yet, not one without its log reader.
        self.builds = jit_watch.BuildWatch(self.env)
        self.proc = subprocess.Popen(
            self.cmd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=proctree.die_with_parent,
        )
        self.last_progress = time.monotonic()
        self._reader = threading.Thread(target=self._pump, name="server-log", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tree_pids(self) -> set[int]:
        """The server process and all its descendants, alive now."""
        return proctree.tree_pids(self.pid)

    def _flush_profiles(self, alive) -> None:
        """Schedulers about to be SIGKILLed (SGLang still draining requests) write their
        profile window first, when the server profiles (common/contract.py)."""
        if not contract.profile_enabled(self.env or {}):
            return
        asked = 0
        for p in alive:
            try:
                if contract.SCHEDULER_TITLE in " ".join(p.cmdline()):
                    p.send_signal(getattr(signal, contract.FLUSH_SIGNAL_NAME))
                    asked += 1
            except psutil.Error:
                continue
        if asked:
            psutil.wait_procs(alive, timeout=contract.FLUSH_GRACE_S)

    def stop(self, grace: float = 20.0) -> set[int]:
        """Stop the whole tree; returns PIDs still alive afterwards (none expected).

        SIGTERM goes to the server process only: SGLang then stops its own
        scheduler and detokenizer cleanly (signalling them directly makes it
        report a crashed scheduler). Whatever is left of the tree after `grace`
        seconds, or was never a child of it, gets SIGKILL.
        """
        if self.proc is None:
            return set()
        procs = []
        for pid in self.tree_pids():
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        if self.proc.poll() is None:
            proctree.send(psutil.Process(self.proc.pid), signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace)
        self._flush_profiles(alive)
        for p in alive:
            proctree.send(p, signal.SIGKILL)
        proctree.killpg(self.pid, signal.SIGKILL)  # anything else left in the session
        psutil.wait_procs(alive, timeout=5)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._reader is not None and self._reader.ident is not None:  # a signal may
            self._reader.join(timeout=5)  # land between the fork and the reader's start
        return {p.pid for p in procs if proctree.is_alive(p)}

    def print_tail(self, prog: str, what: str, n: int = 8) -> None:
        """The last log lines, to stderr: what a failed start said before it stopped."""
        if self.tail:
            print(
                f"{prog}: last {what} log lines:\n  " + "\n  ".join(list(self.tail)[-n:]),
                file=sys.stderr,
            )

    @property
    def phase(self) -> str:
        """The startup phase from the log; with the JIT build seen in the last
        BUILD_RECENT_S (a silent build is what the server is doing)."""
        recent = self.build_seen_at is not None and (
            time.monotonic() - self.build_seen_at <= BUILD_RECENT_S
        )
        return f"{self._phase.phase}; {self.build_note}" if recent else self._phase.phase

    def stalled_for(self) -> float:
        return time.monotonic() - self.last_progress

    def note_builds(self) -> str | None:
        """A compiler in the server's tree or a growing JIT cache (common/jit_watch.py)
        is progress, though the log is silent; returns what was seen."""
        if self.builds is None or self.proc is None:
            return None
        seen = self.builds.poll(self.tree_pids())
        if seen:
            self.last_progress = self.build_seen_at = time.monotonic()
            self.build_note = seen
        return seen

    # -- log --------------------------------------------------------------
    def _pump(self) -> None:
        """Read the server's output to its end, whatever happens to the log: a pipe
        nobody drains blocks the server once ~64 KB are waiting (a READY server
        that no longer answers), so a failed write or a listener bug only stops
        the logging, never the reading."""
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        buf = b""
        try:
            log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError as e:
            log = None
            self._log_failed(e)
        try:
            while True:
                chunk = out.read1(65536) if hasattr(out, "read1") else out.read(65536)
                if not chunk:
                    break
                buf += chunk
                while True:
                    m = LINE_END.search(buf)
                    if not m:
                        break
                    raw, end, buf = buf[: m.start()], buf[m.start() : m.end()], buf[m.end() :]
                    log = self._safe_line(raw.decode("utf-8", "replace"), end.decode(), log)
            if buf:
                log = self._safe_line(buf.decode("utf-8", "replace"), "\n", log)
        finally:
            while out.read(65536):  # only reached after an unexpected error: keep draining
                pass
            if log is not None:
                try:
                    log.close()
                except OSError:
                    pass

    def _log_failed(self, e: Exception) -> None:
        self.log_error = f"{self.log_path}: {getattr(e, 'strerror', None) or e}"
        print(
            f"warning: server log not written any more ({self.log_error}); the server's "
            f"output is still read",
            file=sys.stderr,
            flush=True,
        )

    def _safe_line(self, line: str, end: str, log):
        try:
            self._line(line, end, log)
        except OSError as e:  # the log file (disk full, removed mount): go on without it
            if log is not None:
                self._log_failed(e)
                try:
                    log.close()
                except OSError:
                    pass
            return None
        except Exception as e:  # a listener's bug must not stop the draining
            print(f"warning: server log line not handled: {e!r}", file=sys.stderr)
        return log

    def _line(self, line: str, end: str, log) -> None:
        line = redact_text(line, self.redact)
        probe = startup_phase.is_probe_line(line)
        if probe:  # logged, but the launcher's own polls are not progress (nor the tail)
            self.probe_lines += 1
        else:
            self.last_progress = time.monotonic()  # a tqdm '\r' update is progress too
        if line.strip() and not probe:
            if end == "\n" or not self.tail or self.tail[-1] != line:
                self.tail.append(line)
            self._phase.feed(line)
            for listen in self.listeners:
                listen(line)
        if log is not None and (line.strip() or end == "\n"):
            log.write(line + "\n")
            log.flush()
        if self.echo:
            try:
                sys.stdout.write(line + end)
                sys.stdout.flush()
            except (OSError, ValueError):  # a closed terminal or pipe: stop echoing
                self.echo = False
