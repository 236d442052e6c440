"""The names EAGLE3_PROFILE is known by, defined once: the switch and its
settings (environment variables), the log line's tag and the logger.

Imported by the recorder (inside SGLang's scheduler ranks), the code that
installs it there (in_sglang/), the report and the tests. Plain constants: no
import cost in SGLang's processes.
"""

# Log lines: "EAGLE3_PROFILE v=1 rank=0 ..." (profiling/record.py), and the
# on/disabled announcements, all through this logger.
TAG = "EAGLE3_PROFILE"
LOGGER = "sgl_eagle_ext.profile"

# Environment switches (read once per scheduler process; profiling/recorder/config.py).
ENV = "EAGLE3_PROFILE"  # "1": profile; anything else: nothing is patched
ENV_RANKS = "EAGLE3_PROFILE_RANKS"
ENV_INTERVAL_S = "EAGLE3_PROFILE_INTERVAL_S"
ENV_CYCLES = "EAGLE3_PROFILE_CYCLES"
ENV_FILE = "EAGLE3_PROFILE_FILE"
ENV_SYNC_CHECK = "EAGLE3_PROFILE_SYNC_CHECK"


# A scheduler writes its window now on this signal (its handler: recorder/instrument.py),
# sent by whoever is about to SIGKILL it: SGLang's kill_process_tree (in_sglang/
# profile_flush.py) or the launcher's stop (launcher/server_process.py). Schedulers are
# the processes whose title holds SCHEDULER_TITLE (setproctitle, every release).
FLUSH_SIGNAL_NAME = "SIGUSR2"  # SGLang uses neither SIGUSR1 nor SIGUSR2
SCHEDULER_TITLE = "sglang::scheduler"
FLUSH_GRACE_S = 1.0


def enabled(env) -> bool:
    """The one test of the switch, shared by every place that installs the recorder."""
    return env.get(ENV) == "1"
