"""The one base for every wrapper on SGLang code (the profiling recorder, the adaptive
probe backoff, the CPU harness's v1 fixes, the tuning schedule controller).

Modelled on instrumentation libraries: a feature declares its patches (an anchor
and a wrapt wrapper each), and one `Patches` object per feature installs them all
or none:

- every anchor is resolved first (anchors come from the release table,
  common/releases.py, where they are version knowledge); one missing anchor ->
  nothing installed and ONE log line naming it (fail closed: SGLang serves as
  usual);
- install is idempotent (a second call is a no-op that returns True);
- uninstall restores every original, newest first (an attribute that was
  inherited is deleted again, not shadowed);
- a wrapper is bypassed while the current CUDA stream captures a graph (its work
  would be baked into, or break, the graph); a patch that must run there too says
  `in_capture=True`; install itself refuses during a capture.

Usage (a feature module inside SGLang's processes):

    from sgl_eagle_ext.in_sglang_base import patching

    PATCHES = patching.Patches("EAGLE_EXT_SCHEDULE", logger="sgl_eagle_ext.schedule")

    def _decide(wrapped, slot, args, kwargs):      # wrapt's wrapper signature
        ...
        return wrapped(*args, **kwargs)

    def install(version=None) -> bool:
        release = PATCHES.release(version)       # None: one "disabled" line said
        if release is None:
            return False
        anchor = release.adaptive.decide_anchor if release.adaptive else None
        if anchor is None:
            return PATCHES.refuse(f"SGLang {release.version} has no adaptive controller")
        return PATCHES.install([patching.Wrap(anchor, _decide)], release=release.version,
                               on="on (...)")

    def uninstall() -> None:
        PATCHES.uninstall()

`Set(anchor, value, create=False)` replaces an attribute with a plain value
(`create=True`: the attribute may be absent; uninstall deletes it again).
`PATCHES.resolve(patches, release=...)` resolves without installing (None: the one
line was said), for a feature that prepares state between the two steps;
`PATCHES.install(plan)` then installs that plan.

Code here runs in every scheduler rank: no torch import of its own, nothing on
the GPU; a bypass check costs one attribute test plus, on CUDA only, one
is_current_stream_capturing() call.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import wrapt

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError


@dataclass(frozen=True)
class Wrap:
    """Wrap the callable at `anchor` ("pkg.module:Class.method" or "pkg.module:func")
    with `wrapper(wrapped, instance, args, kwargs)` (wrapt's signature)."""

    anchor: str
    wrapper: Callable
    label: str = ""  # what the anchor is for, named in the failure line
    in_capture: bool = False  # True: run the wrapper during CUDA-graph capture too


@dataclass(frozen=True)
class Set:
    """Replace the attribute at `anchor` with `value` (create=True: it may be absent)."""

    anchor: str
    value: object
    label: str = ""
    create: bool = False


@dataclass
class Resolved:
    """One patch with its anchor found: owner, attribute name, original (None when
    absent and created)."""

    patch: Wrap | Set
    owner: object
    name: str
    original: object
    was_own: bool  # the attribute was in the owner's own __dict__ (else: inherited/absent)
    value: object = None  # what install put there


def resolve(anchor: str, create: bool = False) -> tuple[object, str, object]:
    """'pkg.mod:Class.method' -> (owner, name, original); LookupError when any part is
    missing (with create=True the last name may be missing: original None)."""
    module_name, _, qualname = anchor.partition(":")
    if not qualname:
        raise LookupError(f"{anchor} is not 'module:name'")
    try:
        owner = importlib.import_module(module_name)
    except ImportError as e:
        raise LookupError(f"{module_name} cannot be imported ({e})") from None
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise LookupError(f"{module_name}:{'.'.join(path)} does not exist")
    try:
        original = inspect.getattr_static(owner, name)
    except AttributeError:
        if not create:
            raise LookupError(f"{anchor} does not exist") from None
        original = None
    return owner, name, original


def _capture_check() -> Callable[[], bool] | None:
    """torch's "is the current stream capturing a CUDA graph", where that can be true."""
    torch = sys.modules.get("torch")  # never imported here: no torch, no CUDA graph
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.is_current_stream_capturing
    except Exception:  # a torch without usable CUDA: nothing captures
        pass
    return None


class Patches:
    """One feature's patches on SGLang: installed all or none, removed all.

    `name` starts every line this says ("EAGLE3_PROFILE: ..."); `logger` the
    logger it says them through (once SGLang has configured logging; before that,
    and always when `say` is given, straight to stderr / `say(msg)`); `off` the
    word of the failure line ("disabled", "disabled, serving unprofiled")."""

    def __init__(
        self,
        name: str,
        logger: str | None = None,
        off: str = "disabled",
        say: Callable[[str], None] | None = None,
    ):
        self.name = name
        self.off = off
        self._logger = logging.getLogger(logger or f"sgl_eagle_ext.{name.lower()}")
        self.sink = say  # settable: where the lines go instead of logging
        self._installed: list[Resolved] = []
        self._active = False  # read by every wrapper: False after uninstall
        self._capturing: Callable[[], bool] | None = None

    # -- lines ---------------------------------------------------------------------
    @property
    def logger(self) -> logging.Logger:
        return self._logger

    def say(self, level: int, msg: str) -> None:
        """One line, through logging once it is configured; before SGLang configures
        it (we run first in the scheduler process), straight to stderr, which the
        server log captures."""
        if self.sink is not None:
            self.sink(msg)
        elif logging.getLogger().handlers and self._logger.isEnabledFor(level):
            self._logger.log(level, msg)
        elif level > logging.DEBUG:  # INFO and up reach the log even where SGLang's
            print(msg, file=sys.stderr, flush=True)  # root logger sits at WARNING

    def refuse(self, why: str) -> bool:
        """The one failure line ("NAME: disabled: why"); returns False."""
        self.say(logging.WARNING, f"{self.name}: {self.off}: {why}")
        return False

    def release(self, version: str | None = None) -> releases.Release | None:
        """The release table's row for `version` (None: the installed SGLang); None,
        after the one failure line, when the release is not supported."""
        try:
            return releases.resolve(version)[0]
        except UserError as e:
            self.refuse(e.message)
            return None

    def part(self, name: str, absent: str, version: str | None = None):
        """(the release's row, its `name` entry), or None after the one failure line:
        the release is unknown, or its entry is None (the line: "SGLang X " + `absent`)."""
        release = self.release(version)
        if release is None:
            return None
        value = getattr(release, name)
        if value is None:
            self.refuse(f"SGLang {release.version} {absent}")
            return None
        return release, value

    # -- install / uninstall -------------------------------------------------------
    @property
    def installed(self) -> bool:
        return bool(self._installed)

    def resolve(self, patches: Iterable[Wrap | Set], release: str | None = None):
        """Every anchor resolved (a list of Resolved), or None after the one failure
        line naming the first missing anchor. Touches nothing."""
        plan: list[Resolved] = []
        seen = set()
        for patch in patches:
            try:
                owner, name, original = resolve(patch.anchor, getattr(patch, "create", False))
            except LookupError as e:
                where = f"SGLang {release}: " if release else ""
                label = f" ({patch.label})" if patch.label else ""
                self.refuse(f"{where}anchor {patch.anchor}{label} not found: {e}")
                return None
            if (id(owner), name) in seen:  # an anchor shared (e.g. by two workers): once
                continue
            seen.add((id(owner), name))
            was_own = name in getattr(owner, "__dict__", {})
            plan.append(Resolved(patch, owner, name, original, was_own))
        return plan

    def install(
        self,
        patches: Iterable[Wrap | Set] | list[Resolved],
        release: str | None = None,
        on: str | None = None,
    ) -> bool:
        """Install every patch, or none (False, one line). Idempotent: True at once
        when installed already. `on`: the line said once installed ("NAME: on")."""
        if self._installed:
            return True
        patches = list(patches)
        plan = (
            patches
            if patches and all(isinstance(p, Resolved) for p in patches)
            else self.resolve(patches, release)
        )
        if plan is None:
            return False
        capturing = _capture_check()
        if capturing is not None and capturing():
            return self.refuse("called during CUDA-graph capture; nothing wrapped")
        self._capturing = capturing
        self._active = True
        for r in plan:
            if isinstance(r.patch, Wrap):
                value = wrapt.FunctionWrapper(r.original, self._guarded(r.patch))
            else:
                value = r.patch.value
            setattr(r.owner, r.name, value)
            r.value = value
            self._installed.append(r)
        if on:
            self.say(logging.INFO, f"{self.name}: {on}")
        return True

    def _guarded(self, patch: Wrap):
        wrapper = patch.wrapper
        if patch.in_capture:

            def run(wrapped, instance, args, kwargs):
                if not self._active:
                    return wrapped(*args, **kwargs)
                return wrapper(wrapped, instance, args, kwargs)

        else:

            def run(wrapped, instance, args, kwargs):
                capturing = self._capturing
                if not self._active or (capturing is not None and capturing()):
                    return wrapped(*args, **kwargs)
                return wrapper(wrapped, instance, args, kwargs)

        return run

    def uninstall(self) -> None:
        """Restore every original, newest first. A patch something else has wrapped
        again since stays in place, inert (its wrapper passes straight through), so
        the other wrapper keeps working."""
        self._active = False
        while self._installed:
            r = self._installed.pop()
            if vars(r.owner).get(r.name) is not r.value:
                continue  # wrapped over by another feature: left inert
            if r.was_own:
                setattr(r.owner, r.name, r.original)
            else:
                delattr(r.owner, r.name)
