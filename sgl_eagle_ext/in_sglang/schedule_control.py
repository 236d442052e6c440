"""The schedule controller of `tune --live`: hold the draft steps the tuner asks for.

SGLang's adaptive speculation (0.5.16+) prebuilds a runtime state (and CUDA graphs)
for every candidate step count and picks one per batch-size bucket at run time.
This wrapper on the bucket router's per-verify entry (the release table's
`adaptive.control_anchor`) reads a small JSON file, named by EAGLE_EXT_SCHEDULE_FILE,
that the tuner rewrites between measurements:

    {"seq": 7, "pin": 3}                  every bucket holds 3 steps; no EMA, no decision
    {"seq": 8, "table": "/x/tuned.json", "initial_steps": 2}
                                          SGLang's own controller on that table (its own
                                          loader, routing, warm-up and EMA), as if launched
                                          with it; steps outside the launch's prebuilt
                                          candidates are refused; the same path again
                                          (after a pin) resumes that controller's state
    {"seq": 9}                            the table the server was launched with

Every TP rank reads the file at its own verify steps, so the ranks must see a change at
the same batch: the tuner writes it only while the server is idle (no request in
flight; os.replace, so a read never sees half a file), and each rank stats it at every
verify (a few microseconds on the host, against milliseconds of GPU work; the parsed
content is cached by mtime, size and inode). Nothing here touches the GPU.

Installed in every scheduler process (its FEATURE in the in-process registry) when
EAGLE_EXT_SCHEDULE_FILE is set, through the patching base (patching.py): idempotent, reversible, fail closed (an
unknown release, a missing anchor or a bad file leaves SGLang's own controller in
charge, with one log line; rank 0 tells what every rank does alike). SGLang logs each switch ("Switch adaptive
runtime state: steps a -> b"); the profile windows carry the steps they ran.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import weakref
from dataclasses import dataclass, field

from sgl_eagle_ext.common.contract import SCHEDULE_FILE_ENV
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


# -- the control file ---------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    seq: int
    pin: int | None = None
    table: str | None = None
    initial_steps: int | None = None


def parse(data) -> Control:
    """The file's content; ValueError names what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("seq"), int):
        raise ValueError('not a JSON object with an integer "seq"')
    pin, table, initial = data.get("pin"), data.get("table"), data.get("initial_steps")
    if pin is not None and (not isinstance(pin, int) or isinstance(pin, bool) or pin < 0):
        raise ValueError(f'"pin" must be a whole number of steps >= 0, got {pin!r}')
    if table is not None and not isinstance(table, str):
        raise ValueError(f'"table" must be a path, got {table!r}')
    if pin is not None and table is not None:
        raise ValueError('"pin" and "table" together')
    if initial is not None and not isinstance(initial, int):
        raise ValueError(f'"initial_steps" must be an integer, got {initial!r}')
    return Control(data["seq"], pin, table, initial)


class ControlFile:
    """The latest good content of the file, re-read only when it changed on disk."""

    def __init__(self, path: str):
        self.path = path
        self._key: tuple | None = None
        self.control: Control | None = None

    def current(self) -> Control | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return self.control  # not written yet, or being replaced: keep the last
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self._key:
            return self.control
        self._key = key
        try:
            with open(self.path, encoding="utf-8") as f:
                self.control = parse(json.load(f))
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            _say(logging.WARNING, f"{SCHEDULE_FILE_ENV}: {self.path}: {e}; keeping the last")
        return self.control


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
        if ctl.pin not in params.candidate_steps:
            state.seq = None  # try again (and say so) when the file changes
            return (
                f"{SCHEDULE_FILE_ENV}: seq {seq}: steps {ctl.pin} not pinned: not a "
                f"candidate of this server ({params.candidate_steps})"
            )
        return f"{SCHEDULE_FILE_ENV}: seq {seq}: steps pinned at {ctl.pin} in every bucket"
    why = _install_table(params, ctl, state)
    if why:
        return f"{SCHEDULE_FILE_ENV}: seq {seq}: table not installed: {why}"
    return f"{SCHEDULE_FILE_ENV}: seq {seq}: SGLang's controller on {ctl.table}"


def _wrapper(control: ControlFile):
    """The wrapper on the router's verify entry (wrapt's signature)."""

    def wrapper(wrapped, params, args, kwargs):
        ctl = control.current()
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


# -- install, uninstall ----------------------------------------------------------------


def install(path: str, version: str | None = None) -> bool:
    """Wrap the router's verify entry (the release table's anchor) through the patching
    base; True when installed (now or before)."""
    if PATCHES.installed:
        return True
    release = PATCHES.release(version)
    if release is None:  # an unknown release: SGLang's own controller
        return False
    anchor = release.adaptive.control_anchor if release.adaptive else None
    if anchor is None:
        return PATCHES.refuse(f"no schedule-control anchor for SGLang {release.version}")
    return PATCHES.install(
        [patching.Wrap(anchor, _wrapper(ControlFile(path)), label="the adaptive verify entry")],
        release=release.version,
        on=f"on ({path})" if _rank() == 0 else None,
    )


def uninstall() -> None:
    PATCHES.uninstall()


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
