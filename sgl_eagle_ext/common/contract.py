"""Names the launcher and the code inside SGLang's processes agree on: the
server entry module and the environment variables and log tags that cross
the process boundary. Defined here once; both sides import them."""

# `python -m SERVE_MODULE <sglang args>`: SGLang's HTTP server with our scheduler entry.
SERVE_MODULE = "sgl_eagle_ext.in_sglang.serve"
# The API key travels to the server in this variable, never on a command line (ps, /proc).
API_KEY_ENV = "EAGLE_EXT_API_KEY"
# Set by the CPU harness overlay (launch/overlays/cpu.toml).
CPU_ENV = "EAGLE_EXT_CPU"
# Fault injection for the launcher's own tests (in_sglang/faults.py): "hang-scheduler"
# hangs every scheduler before SGLang starts in it (a stuck CUDA-graph capture),
# "hang-warmup" hangs the first batch once HTTP is up (a hung rank in the warm-up):
# the watchdog must name the phase and stop the whole tree.
FAULT_ENV = "EAGLE_EXT_FAULT"
# One line per TP rank with the NCCL variables it really has (in_sglang/nccl_report.py).
NCCL_TAG = "EAGLE_EXT_NCCL"
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")
NCCL_EXTRA = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES")
# The adaptive controller's probe backoff (in_sglang/adaptive_backoff.py): the most
# decisions to stay at 0 steps after failed probes; unset or 0 = SGLang's own behaviour.
ADAPTIVE_BACKOFF_ENV = "EAGLE_EXT_ADAPTIVE_BACKOFF"
# Chain verifies on SGLang's split-KV verify kernels (in_sglang/chain_verify.py): "1"
# on with SGLang's launch parameters, "splits=N,block-n=M" with these, "0"/unset off.
CHAIN_VERIFY_ENV = "EAGLE_EXT_CHAIN_VERIFY"
# The draft's catch-up after 0-step cycles (in_sglang/draft_catchup.py): "N" keeps up
# to N positions per request at 0 steps (the draft runs over them in one extend when
# drafting resumes, or when N are kept); "1" = 64; "0"/unset: SGLang's per-cycle
# draft-extend.
DRAFT_CATCHUP_ENV = "EAGLE_EXT_DRAFT_CATCHUP"
# The schedule controller (in_sglang/schedule_control.py): a JSON file the tuner writes
# (tune --live) and every scheduler rank reads at each adaptive decision: hold one step
# count everywhere, or run SGLang's own controller on another table, without a restart.
SCHEDULE_FILE_ENV = "EAGLE_EXT_SCHEDULE_FILE"


# EAGLE3_PROFILE: the switch, read by the launcher's stop as well as by the recorder.
PROFILE_ENV = "EAGLE3_PROFILE"


def profile_enabled(env) -> bool:
    """The one test of the switch, shared by every place that installs the recorder."""
    return env.get(PROFILE_ENV) == "1"


# A scheduler writes its profile window now on this signal (its handler:
# profiling/recorder/instrument.py), sent by whoever is about to SIGKILL it: SGLang's
# kill_process_tree (in_sglang_base/profile_flush.py) or the launcher's stop
# (common/server_process.py). Schedulers are the processes whose title holds
# SCHEDULER_TITLE (setproctitle, every release).
FLUSH_SIGNAL_NAME = "SIGUSR2"  # SGLang uses neither SIGUSR1 nor SIGUSR2
SCHEDULER_TITLE = "sglang::scheduler"
FLUSH_GRACE_S = 1.0


def parse_chain_verify(text: str) -> dict[str, int] | None:
    """CHAIN_VERIFY_ENV's value -> launch parameters ({} = SGLang's own); None: off.
    ValueError for anything else (the server then refuses the feature: off). Read by
    the feature in the scheduler and by the memory plan's scratch estimate."""
    text = text.strip()
    if text in ("", "0", "off"):
        return None
    if text in ("1", "on"):
        return {}
    params = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if key not in ("splits", "block-n") or not sep or not value.strip().isdigit():
            raise ValueError(f"{part.strip()!r} is not splits=N or block-n=M")
        n = int(value)
        if n < 1 or n & (n - 1) or n > 1024:
            raise ValueError(f"{key}={n} is not a power of two from 1 to 1024")
        params[key] = n
    return params


DRAFT_CATCHUP_DEFAULT = 64


def parse_draft_catchup(text: str) -> int | None:
    """DRAFT_CATCHUP_ENV's value -> positions kept per request; None: off. ValueError for
    anything else (the server then refuses the feature: off). Read by the feature in the
    scheduler and by the memory plan."""
    text = (text or "").strip()
    if text in ("", "0"):
        return None
    if text == "1":
        return DRAFT_CATCHUP_DEFAULT
    if not text.isdigit() or not 2 <= int(text) <= 4096:
        raise ValueError("want 0 (off), 1 (64 positions) or a count of positions 2-4096")
    return int(text)
