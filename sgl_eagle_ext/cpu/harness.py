"""CPU harness: what a real SGLang server needs to run EAGLE-3 on a CPU-only box.

`install_server()` runs in the HTTP server process before SGLang is imported;
`install_scheduler()` runs first in every (spawned) scheduler process (both through
this module's FEATURE in the in-process registry, when EAGLE_EXT_CPU=1). Both are
idempotent. Each fix checks its anchor in SGLang and logs one line when the
anchor is missing, instead of failing somewhere deeper. Releases with the v1
EAGLE worker (0.5.10.post1) get the extra fixes of v1_fixes.py; torchvision on
a CPU torch build is handled in every process by torchvision_ops.py (a .pth
file the installer writes). Each fix's docstring says what it works around and
in which releases.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

from sgl_eagle_ext.common.contract import CPU_ENV
from sgl_eagle_ext.in_sglang_base import registry

logger = logging.getLogger("sgl_eagle_ext.cpu")

STANDIN_DIR = str(Path(__file__).resolve().parent / "standin")

# Environment the CPU route needs in every process (spawned children inherit it):
# is_cpu() is false without the first; no GPU driver -> Triton's interpreter.
REQUIRED_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "TRITON_INTERPRET": "1"}

_done: set[str] = set()


def say(msg: str) -> None:
    # Before SGLang configures logging, a plain stderr line is the reliable one.
    print(f"[sgl_eagle_ext.cpu] {msg}", file=sys.stderr, flush=True)


def _put_standin_first() -> None:
    """The sgl_kernel stand-in first on sys.path, and in PYTHONPATH for children."""
    if sys.path[:1] != [STANDIN_DIR]:
        while STANDIN_DIR in sys.path:
            sys.path.remove(STANDIN_DIR)
        sys.path.insert(0, STANDIN_DIR)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if parts[:1] != [STANDIN_DIR]:
        parts = [STANDIN_DIR] + [p for p in parts if p != STANDIN_DIR]
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)


def _check_standin() -> None:
    """Say so when `sgl_kernel` is (or would be) another package than the stand-in."""
    import importlib.util

    expected = os.path.join(STANDIN_DIR, "sgl_kernel", "__init__.py")
    if not os.path.isfile(expected):
        say(f"anchor missing: stand-in not found at {expected}")
        return
    mod = sys.modules.get("sgl_kernel")
    if mod is not None:
        origin = getattr(mod, "__file__", None)
    else:
        spec = importlib.util.find_spec("sgl_kernel")
        origin = spec.origin if spec else None
    if origin is None or os.path.realpath(origin) != os.path.realpath(expected):
        say(f"anchor missing: sgl_kernel resolves to {origin}, not the stand-in {expected}")


def installed_release():
    """The release table's row for the installed SGLang, None if unknown."""
    from sgl_eagle_ext.common import releases

    version = releases.installed_version()
    return releases.BY_VERSION.get(version) if version else None


def _check_tree_kernels(release) -> None:
    """The stand-in's tree ops call SGLang's Triton functions where the release
    has them (Release.tree_kernels), else its own PyTorch reference; say which."""
    module = release.tree_kernels if release else "sglang.kernels.ops.speculative.spec_tree"
    if module is None:
        say(
            f"SGLang {release.version} ships no Triton tree kernels: tree build/verify use "
            "the stand-in's PyTorch reference (sgl_kernel/tree_ref.py)"
        )
        return
    try:
        spec_tree = importlib.import_module(module)
    except ImportError as exc:
        say(
            f"anchor missing: {module} ({exc}); tree build/verify fall back to the "
            "PyTorch reference"
        )
        return
    for name in ("sgl_build_tree_kernel_triton", "verify_tree_greedy_triton"):
        if not hasattr(spec_tree, name):
            say(
                f"anchor missing: {module}.{name}; tree build/verify fall back to the "
                "PyTorch reference"
            )


def _set_required_env() -> None:
    for name, value in REQUIRED_ENV.items():
        current = os.environ.get(name)
        if current is None:
            os.environ[name] = value
            say(f"{name} was unset; set to {value}")
        elif current != value:
            say(f"{name}={current!r}; the CPU route needs {value!r}")


def install_server() -> None:
    """Server process, before any SGLang (or Triton) import."""
    if "server" in _done:
        return
    if "triton" in sys.modules:
        say("anchor missing: triton imported before the harness; TRITON_INTERPRET may not apply")
    _set_required_env()
    _put_standin_first()
    _check_standin()
    _done.add("server")


# ---------------------------------------------------------------- scheduler


def _force_full_tree_mask(release) -> None:
    """On CPU `default_tree_mask_mode()` says QLEN_ONLY, the layout the intel_amx
    backend reads; the Triton backend (the harness's) reads FULL_MASK. With the
    wrong layout drafted tokens see the wrong prefix and greedy output changes.

    Replaced in eagle_utils before the EAGLE workers are imported (they bind the
    name with `from ... import`), and rebound in any sglang module that already
    holds the old function.
    """
    try:
        from sglang.srt.speculative import eagle_utils
    except ImportError as exc:
        say(
            f"anchor missing: sglang.srt.speculative.eagle_utils ({exc}); tree-mask fix not applied"
        )
        return
    original = getattr(eagle_utils, "default_tree_mask_mode", None)
    mode_enum = getattr(eagle_utils, "TreeMaskMode", None)
    if original is None and release is not None and release.spec_worker == "v1":
        say(
            f"tree mask: SGLang {release.version}'s v1 worker builds FULL_MASK itself "
            "(no default_tree_mask_mode); nothing to force"
        )
        return
    if original is None or not hasattr(mode_enum, "FULL_MASK"):
        say(
            "anchor missing: eagle_utils.default_tree_mask_mode / TreeMaskMode.FULL_MASK; "
            "tree-mask fix not applied"
        )
        return
    if getattr(original, "_eagle_ext_cpu", False):
        return

    def default_tree_mask_mode():
        return mode_enum.FULL_MASK  # what the Triton attention backend reads

    default_tree_mask_mode._eagle_ext_cpu = True
    rebound = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("sglang.") and getattr(mod, "default_tree_mask_mode", None) is original:
            mod.default_tree_mask_mode = default_tree_mask_mode
            rebound.append(name)
    say(f"tree mask forced to FULL_MASK for the Triton backend (rebound in {len(rebound)} modules)")


def _lighten_interpreter() -> None:
    """Triton's interpreter without its unread overflow checks, patching the language
    once per launch and remembering its dtype lookups (cpu/interpreter_patching.py: 23%,
    13% and 7% of a scheduler's CPU)."""
    from sgl_eagle_ext.cpu import interpreter_patching

    why_not = interpreter_patching.install()
    if why_not:
        say(f"anchor missing: {why_not}; the interpreter runs as it ships")
    else:
        say(
            "Triton's interpreter: overflow checks off while debug is off, the language "
            "patched once per launch, dtype lookups remembered (cpu/interpreter_patching.py)"
        )


def install_scheduler() -> None:
    """Scheduler process, before SGLang's run_scheduler_process."""
    if "scheduler" in _done:
        return
    for name, value in REQUIRED_ENV.items():
        if os.environ.get(name) != value:
            say(
                f"{name} is {os.environ.get(name)!r} in the scheduler; the CPU route needs {value!r}"
            )
    _put_standin_first()  # inherited through PYTHONPATH; kept for direct callers
    _check_standin()
    release = installed_release()
    _force_full_tree_mask(release)  # imports eagle_utils, hence spec_tree and sgl_kernel
    _check_standin()
    _check_tree_kernels(release)
    _lighten_interpreter()
    _done.add("scheduler")  # then the v1 fixes (cpu/v1_fixes.py), their own feature


def enabled(env) -> bool:
    """The harness's switch, set by the CPU overlay (launch/overlays/cpu.toml)."""
    return env.get(CPU_ENV) == "1"


# Not through the plugin: the server half must run before SGLang is imported, which
# only the launcher's server entry (in_sglang/serve.py) can do.
FEATURE = registry.register(
    registry.Feature(
        CPU_ENV,
        enabled=enabled,
        hooks={
            registry.SERVER: lambda ctx: install_server(),
            registry.SCHEDULER: lambda ctx: install_scheduler(),
        },
        order=registry.PLATFORM,
        plugin=False,
    )
)
