"""The schedule controller of `tune --live`: hold the draft steps the tuner asks for.

SGLang's adaptive speculation (0.5.16+) prebuilds a runtime state (and CUDA graphs)
for every candidate step count and picks one per batch-size bucket at run time.
This wrapper on the bucket router's per-verify entry (the release table's
`adaptive.control_anchor`) holds what the tuner asks for in a small JSON file named by
EAGLE_EXT_SCHEDULE_FILE (format and writer: common/schedule_file.py):

    {"seq": 7, "pin": 3}                  every bucket holds 3 steps; no EMA, no decision
    {"seq": 8, "table": "/x/tuned.json", "initial_steps": 2}
                                          SGLang's own controller on that table (its own
                                          loader, routing, warm-up and EMA), as if launched
                                          with it; steps outside the launch's prebuilt
                                          candidates are refused; the same path again
                                          (after a pin) resumes that controller's state
    {"seq": 9}                            the table the server was launched with

TP ranks must switch at the same batch, or their collectives stop matching (a hang).
That holds by construction, not by the tuner's timing: only TP rank 0 reads the file,
and it writes a grant naming the verify (counted alike on every rank) at which the
control applies; every rank reads the grants and switches at that verify (Controller
says why that verify is still ahead of every rank). Per verify a rank stats one file
(a few microseconds on the host); no collective, nothing on the GPU.

Installed in every scheduler process (its FEATURE in the in-process registry) when
EAGLE_EXT_SCHEDULE_FILE is set, through the patching base (patching.py): idempotent, reversible, fail closed (an
unknown release, a missing anchor or a bad file leaves SGLang's own controller in
charge, with one log line; rank 0 tells what every rank does alike). SGLang logs each switch ("Switch adaptive
runtime state: steps a -> b"); the profile windows carry the steps they ran.
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
from dataclasses import dataclass, field

from sgl_eagle_ext.common import schedule_file
from sgl_eagle_ext.common.contract import SCHEDULE_FILE_ENV
from sgl_eagle_ext.common.schedule_file import Control, parse  # noqa: F401 (the format)
from sgl_eagle_ext.in_sglang_base import patching, registry


def _line(msg: str) -> None:
    """Where this feature's lines go: SGLang's log at INFO where logging lets it through,
    else stderr (the server log too). The scheduler process has logging handlers before
    SGLang raises the level to INFO, so the base's logging path would drop "on"."""
    logger = logging.getLogger("sgl_eagle_ext.schedule_control")
    if logging.getLogger().handlers and logger.isEnabledFor(logging.INFO):
        logger.info(msg)
    else:
        print(msg, file=sys.stderr, flush=True)


PATCHES = patching.Patches(SCHEDULE_FILE_ENV, logger="sgl_eagle_ext.schedule_control", say=_line)


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # no usable torch.distributed: one rank
        return 0


def _say(level: int, msg: str) -> None:
    """Every TP rank sees the same file and router: rank 0 tells, for all."""
    if _rank() == 0:
        PATCHES.say(level, msg)


# -- the control in force: rank 0 grants, every rank applies at the same verify ------


def _group() -> str:
    """This TP group's key: the server process (all ranks of one server share their
    parent; a stale grants file of an earlier server is never read) and the DP replica
    (each replica is its own TP group with its own rank 0), read once from SGLang's
    run_scheduler_process frame, which is below every verify on the stack."""
    dp = None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run_scheduler_process" and "dp_rank" in frame.f_locals:
            dp = frame.f_locals["dp_rank"]
            break
        frame = frame.f_back
    return f"{os.getppid()}" + (f"-dp{dp}" if dp is not None else "")


class Controller:
    """The control in force on this rank, changed only at a verify rank 0 named.

    Every rank counts the calls of the router's per-verify entry (`n`); TP ranks run the
    same batches, so the n-th call is the same batch everywhere. Rank 0 alone reads the
    tuner's request; on a new one it writes a grant: the control and the verify at
    which it applies, `apply_at`, then every rank (rank 0 too) switches at that verify:

    - at a verify k (under load): apply_at = k + MARGIN. The other ranks are within
      SKEW verifies of rank 0 and read the grants at each verify, so each reads it by
      its verify k+SKEW+1 <= apply_at (schedule_file.py: why SKEW holds);
    - while the scheduler is idle (the tuner writes between rounds): apply_at = n + 1.
      Rank 0 idle means every batch has finished on every rank (a batch needs all
      ranks): no rank is past n, and every rank reads the grant before its next verify.

    One grant pending at a time; the file keeps the last few, so a rank that missed a
    rewrite still applies each in order. A grant read after its verify (impossible by
    the above; a file system that shows it late would do it) is applied at once with
    an ERROR line naming the rank and the verifies: never silent.
    """

    def __init__(self, path: str, margin: int = schedule_file.MARGIN, rank_fn=None):
        self.path = path
        self.margin = margin
        self.rank_fn = rank_fn or _rank
        self.request = schedule_file.Cached(path, schedule_file.parse, self._bad_file)
        self.grants: schedule_file.Cached | None = None
        self.rank: int | None = None
        self.n = 0  # verifies seen
        self.issued: list[schedule_file.Grant] = []  # rank 0: what it granted
        self.pending: list[schedule_file.Grant] = []  # granted, not yet in force
        self.last_seq: int | None = None  # rank 0: the newest request granted
        self.last_at = 0  # the newest grant's apply_at seen (grants rise in it)
        self.in_force: Control | None = None

    def _bad_file(self, msg: str) -> None:
        _say(logging.WARNING, f"{SCHEDULE_FILE_ENV}: {msg}")

    def _setup(self) -> None:
        if self.rank is None:
            self.rank = self.rank_fn()
            path = schedule_file.grant_path(self.path, _group())
            if self.rank == 0:
                try:
                    os.unlink(path)  # a stale file of a reused parent pid
                except OSError:
                    pass
            self.grants = schedule_file.Cached(path, schedule_file.parse_grants, self._bad_file)

    def on_verify(self) -> Control | None:
        """One verify on this rank: the control in force for it."""
        self._setup()
        self.n += 1
        if self.rank == 0:
            self._grant(self.n + self.margin)
        else:
            self._read_grants()
        while self.pending and self.pending[0].apply_at <= self.n:
            self.in_force = self.pending.pop(0).control
        return self.in_force

    def on_idle(self) -> None:
        """The scheduler has no batch: rank 0 grants a new request for the next verify."""
        self._setup()
        if self.rank == 0:
            self._grant(self.n + 1)

    def _grant(self, apply_at: int) -> None:
        if self.pending:  # one at a time: the next waits until this one is in force
            return
        ctl = self.request.current()
        if ctl is None or ctl.seq == self.last_seq:
            return
        grant = schedule_file.Grant(apply_at, ctl)
        self.issued = [*self.issued, grant][-schedule_file.HISTORY :]
        try:
            schedule_file.write_grants(self.grants.path, self.issued)
        except OSError as e:  # no grant written: nobody switches, rank 0 neither
            self.issued.pop()
            _say(logging.WARNING, f"{SCHEDULE_FILE_ENV}: cannot write {self.grants.path}: {e}")
            return
        self.last_seq = ctl.seq
        self.last_at = apply_at
        self.pending.append(grant)

    def _read_grants(self) -> None:
        for g in self.grants.current() or ():
            if g.apply_at <= self.last_at:
                continue
            if g.apply_at < self.n:
                PATCHES.say(
                    logging.ERROR,
                    f"{SCHEDULE_FILE_ENV}: rank {self.rank} read the grant for seq "
                    f"{g.control.seq} at verify {self.n}, after its verify {g.apply_at}: "
                    "this rank switches late, ranks may disagree on the step count",
                )
            self.last_at = g.apply_at
            self.pending.append(g)


# -- what the wrapper does -----------------------------------------------------------


@dataclass
class _Applied:
    seq: int | None = None
    launch: tuple | None = None  # (slots, bs_list) the server was launched with
    # table path -> its (slots, bs_list): back from a pin, SGLang's controller goes on
    # where it was (its EMA and warm-up count kept), so pinned and adaptive rounds can
    # alternate
    tables: dict = field(default_factory=dict)
    broken: bool = False  # the router lacks what the controller uses: SGLang's own


_applied: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _set_slots(params, slots: dict, bs_list: list) -> None:
    params._slots, params._bs_list = slots, bs_list


def _install_table(params, ctl: Control, state: _Applied) -> str | None:
    """SGLang's own AdaptiveSpeculativeParams built from the table replaces the buckets;
    None when it cannot (the reason is returned)."""
    if ctl.table in state.tables:
        _set_slots(params, *state.tables[ctl.table])
        return None
    try:
        fresh = type(params)(initial_steps=ctl.initial_steps or 0, cfg_path=ctl.table)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        return f"SGLang's loader refused {ctl.table}: {e}"
    prebuilt = set(params.candidate_steps)  # the runtime states built at launch
    wanted = {s for slot in fresh._slots.values() for s in slot.candidate_steps}
    if not wanted <= prebuilt:
        return (
            f"{ctl.table} lists steps {sorted(wanted - prebuilt)} that this server did not "
            f"prebuild (it has {sorted(prebuilt)})"
        )
    fresh.set_cuda_graph_bs(params._cuda_graph_bs)
    state.tables[ctl.table] = (fresh._slots, fresh._bs_list)
    _set_slots(params, fresh._slots, fresh._bs_list)
    return None


ROUTER_PARTS = ("_slots", "_bs_list", "_cuda_graph_bs", "_route", "set_cuda_graph_bs")


def _apply(params, ctl: Control | None) -> str | None:
    """Bring the buckets in line with `ctl` (once per seq); the log line to print."""
    state = _applied.get(params)
    if state is None:  # first sight of this router: does it have what we use?
        state = _applied[params] = _Applied()
        missing = [a for a in ROUTER_PARTS if not hasattr(params, a)]
        if missing:
            state.broken = True
            return f"{SCHEDULE_FILE_ENV}: disabled: SGLang's router has no {', '.join(missing)}"
    if state.broken:
        return None
    seq = ctl.seq if ctl else None
    if seq == state.seq:
        return None
    state.seq = seq
    if state.launch is None:
        state.launch = (params._slots, params._bs_list)
    _set_slots(params, *state.launch)  # each control starts from the launch table
    if ctl is None or (ctl.pin is None and ctl.table is None):
        return f"{SCHEDULE_FILE_ENV}: seq {seq}: the launch table, SGLang's controller"
    if ctl.pin is not None:
        if ctl.pin not in params.candidate_steps:  # said once: SGLang's controller decides
            return (
                f"{SCHEDULE_FILE_ENV}: seq {seq}: steps {ctl.pin} not pinned: not a "
                f"candidate of this server ({params.candidate_steps})"
            )
        return f"{SCHEDULE_FILE_ENV}: seq {seq}: steps pinned at {ctl.pin} in every bucket"
    why = _install_table(params, ctl, state)
    if why:
        return f"{SCHEDULE_FILE_ENV}: seq {seq}: table not installed: {why}"
    return f"{SCHEDULE_FILE_ENV}: seq {seq}: SGLang's controller on {ctl.table}"


def _wrapper(control: Controller):
    """The wrapper on the router's verify entry (wrapt's signature)."""

    def wrapper(wrapped, params, args, kwargs):
        ctl = control.on_verify()
        said = _apply(params, ctl)
        if said:
            _say(logging.INFO, said)
        if _applied[params].broken or ctl is None or ctl.pin is None:
            return wrapped(*args, **kwargs)
        if ctl.pin not in params.candidate_steps:
            return wrapped(*args, **kwargs)
        batch_size = kwargs.get("batch_size", args[1] if len(args) > 1 else None)
        routed = params._route(batch_size) if batch_size is not None else None
        switch = routed is not None and routed.current_steps != ctl.pin
        for slot in params._slots.values():  # others switch at their next batch
            slot.current_steps = ctl.pin
        return ctl.pin if switch else None  # SGLang's worker switches its runtime state

    return wrapper


def _idle_wrapper(control: Controller):
    """The wrapper on the scheduler's no-batch housekeeping: rank 0 grants there."""

    def wrapper(wrapped, scheduler, args, kwargs):
        try:
            return wrapped(*args, **kwargs)
        finally:
            control.on_idle()

    return wrapper


# -- install, uninstall ----------------------------------------------------------------

CONTROLLER: Controller | None = None  # this process's, while installed


def install(path: str, version: str | None = None) -> bool:
    """Wrap the router's verify entry (the release table's anchor) and the scheduler's
    idle housekeeping through the patching base; True when installed (now or before)."""
    global CONTROLLER
    if PATCHES.installed:
        return True
    release = PATCHES.release(version)
    if release is None:  # an unknown release: SGLang's own controller
        return False
    anchor = release.adaptive.control_anchor if release.adaptive else None
    if anchor is None:
        return PATCHES.refuse(f"no schedule-control anchor for SGLang {release.version}")
    control = Controller(path)
    wraps = [patching.Wrap(anchor, _wrapper(control), label="the adaptive verify entry")]
    # Without the idle anchor, a request written while idle applies MARGIN verifies
    # into the next round instead of at its first verify: still the same on every rank.
    idle = next((w.idle for w in release.workers if w.idle), None)
    if idle:
        wraps.append(patching.Wrap(idle, _idle_wrapper(control), label="the idle housekeeping"))
    ok = PATCHES.install(
        wraps, release=release.version, on=f"on ({path})" if _rank() == 0 else None
    )
    CONTROLLER = control if ok else None
    return ok


def uninstall() -> None:
    global CONTROLLER
    PATCHES.uninstall()
    CONTROLLER = None


def install_from_env(env) -> bool:
    path = env.get(SCHEDULE_FILE_ENV, "").strip()
    return install(path) if path else False


FEATURE = registry.register(
    registry.Feature(
        SCHEDULE_FILE_ENV,
        enabled=lambda env: bool(env.get(SCHEDULE_FILE_ENV, "").strip()),
        hooks={registry.SCHEDULER: lambda ctx: install_from_env(ctx.env)},
        order=registry.CONTROL,
    )
)
