"""Triton's interpreter patches `triton.language` once per language module per launch.

Under TRITON_INTERPRET=1 a kernel launch (`GridExecutor.__call__`) swaps the language's
builtins for interpreted ones (`_patch_lang`) and restores them when the grid is done.
Every call of a `@triton.jit` device function inside the kernel (`tl.max`, `tl.sum`,
`tl.cdiv`, a module's own helper) patches again, in every program instance and loop
iteration: the same swaps, found again by `inspect.getmembers` over the modules, never
restored (the launch's restore undoes what matters). In a tiny-pair EAGLE server that
repetition was 13% of the scheduler's CPU.

Here a launch remembers which language modules it has patched (a device function in
`triton/language/standard.py` sees `tl.core`, the kernel's module `tl`), and a later
patch of the same modules in the same launch is skipped: the swaps are in place until
the launch restores them. The kernels and what they compute are Triton's and SGLang's,
unchanged; a launch's first patch of each module set is Triton's own call.

Installed in the scheduler processes by the CPU harness (cpu/harness.py); Triton 3.8
and 3.9 (the two harnesses). A Triton without these anchors runs as it ships.
"""

from __future__ import annotations

import threading

import wrapt

_state = threading.local()  # .patched: this launch's module sets, None outside one
ANCHORS = ("_patch_lang", "_LangPatchScope", "GridExecutor")


def missing_anchors(interpreter) -> list[str]:
    return [a for a in ANCHORS if not hasattr(interpreter, a)]


def _modules(fn, tl) -> frozenset[int]:
    """What `_patch_lang(fn)` patches: the language modules fn's globals hold."""
    return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)


def _launch(wrapped, instance, args, kwargs):
    outer = getattr(_state, "patched", None)
    _state.patched = set()
    try:
        return wrapped(*args, **kwargs)
    finally:
        _state.patched = outer


def install() -> str | None:
    """Wrap the interpreter (idempotent). None when installed, else why not."""
    import triton.language as tl
    from triton.runtime import interpreter

    missing = missing_anchors(interpreter)
    if missing:
        return f"triton.runtime.interpreter has no {', '.join(missing)}"
    if isinstance(interpreter._patch_lang, wrapt.FunctionWrapper):
        return None

    def patch_lang(wrapped, instance, args, kwargs):
        patched = getattr(_state, "patched", None)
        if patched is None:  # not inside a launch: as Triton does
            return wrapped(*args, **kwargs)
        (fn,) = args
        key = _modules(fn, tl)
        if key in patched:
            return interpreter._LangPatchScope()  # nothing to restore: already swapped
        patched.add(key)
        return wrapped(*args, **kwargs)

    wrapt.wrap_function_wrapper(interpreter, "_patch_lang", patch_lang)
    wrapt.wrap_function_wrapper(interpreter, "GridExecutor.__call__", _launch)
    return None


def uninstall() -> None:
    """Put Triton's own functions back (tests)."""
    from triton.runtime import interpreter

    if isinstance(interpreter._patch_lang, wrapt.FunctionWrapper):
        interpreter._patch_lang = interpreter._patch_lang.__wrapped__
    call = vars(interpreter.GridExecutor).get("__call__")
    if isinstance(call, wrapt.FunctionWrapper):
        interpreter.GridExecutor.__call__ = call.__wrapped__
