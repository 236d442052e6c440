"""SGLang binds its HTTP port only after the weights load; the preflight checked the
port long before. When another process takes it in between, SGLang logs
`[Errno 98] ... address already in use` and then waits in its warm-up against the
other process until a timeout (minutes), so the launcher watches the log for that
line and stops the tree at once, naming who holds the port."""

from __future__ import annotations

import re
import signal
import threading

from sgl_eagle_ext.common.http import listener_pids
from sgl_eagle_ext.common.server_process import EXIT_SERVER_FAILED, StartupFailed

BIND_FAILED = re.compile(r"\[Errno 98\].*address already in use", re.IGNORECASE)
# uvicorn: "error while attempting to bind on address ('127.0.0.1', 30000): ..."
BIND_PORT = re.compile(r"""address \(['"]?[^,]*['"]?, (\d+)\)""")
WAKE = signal.SIGUSR1  # interrupts the main thread's readiness wait (sleep or socket read)


class BindWatch:
    """A server-log listener (ServerProcess `listeners`). arm() in the main thread
    before the wait; the first bind failure raises StartupFailed there."""

    def __init__(self, port: int):
        self.port = port
        self.failure: StartupFailed | None = None
        self.server = None
        self._main: int | None = None

    def arm(self, server) -> None:
        self.server = server
        if threading.current_thread() is threading.main_thread():
            self._main = threading.get_ident()
            signal.signal(WAKE, self._raise)

    def _raise(self, _signum, _frame):
        if self.failure is not None:
            raise self.failure

    def check(self) -> None:
        """For waits not in the main thread: raise the failure if one was seen."""
        if self.failure is not None:
            raise self.failure

    def __call__(self, line: str) -> None:
        if self.failure is not None or not BIND_FAILED.search(line):
            return
        m = BIND_PORT.search(line)
        port = int(m.group(1)) if m else self.port
        ours = self.server.tree_pids() if self.server is not None else set()
        owners = sorted((listener_pids(port) or set()) - ours)
        who = f"PID {', '.join(map(str, owners))}" if owners else "another process"
        self.failure = StartupFailed(
            f"port {port} was taken by {who} while the model loaded (SGLang could not "
            f"bind it; stopped at once instead of waiting for its warm-up to time out)",
            EXIT_SERVER_FAILED,
        )
        if self._main is not None:
            signal.pthread_kill(self._main, WAKE)
