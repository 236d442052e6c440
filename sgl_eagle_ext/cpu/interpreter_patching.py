"""Three costs of Triton's interpreter (TRITON_INTERPRET=1) that change nothing it computes.

1. Overflow checks whose result nobody reads. The interpreter's options say
   `sanitize_overflow=True, debug=False`: every int32 add, sub and mul (each offset and
   index in a kernel) is redone in int64 and compared with the type's bounds, and the
   result goes to `device_assert`, which returns at once without `debug` (compiled
   Triton drops the check without `debug` too). Here it is off while `debug` is off:
   23% of a tiny-pair EAGLE scheduler's CPU.
2. The language patched again at every device-function call. A kernel launch
   (`GridExecutor.__call__`) swaps `triton.language`'s builtins for interpreted ones
   (`_patch_lang`) and restores them when the grid is done; every call of a `@triton.jit`
   device function inside the kernel (`tl.max`, `tl.sum`, `tl.cdiv`, a module's own
   helper) patches again, in every program instance and loop iteration: the same swaps,
   found again by `inspect.getmembers`, never restored (the launch's restore undoes what
   matters). Here a launch remembers which language modules it has patched (a function
   in `triton/language/standard.py` sees `tl.core`, a kernel's module `tl`) and skips a
   later patch of the same ones: 13% of that scheduler's CPU.
3. A numpy dtype looked up by building a 19-entry table (`_get_np_dtype`) at every
   constant, cast, load and broadcast: 7% of the scheduler's CPU once 1 and 2 were gone.
   Here each element type's answer (one for every pointer type, as Triton gives) is
   Triton's own, remembered after its first call.

The kernels and what they compute are Triton's and SGLang's, unchanged; a launch's first
patch of each module set is Triton's own call. Installed in the scheduler processes by
the CPU harness (cpu/harness.py); Triton 3.8 and 3.9 (the two harnesses). A Triton
without these anchors runs as it ships.
"""

from __future__ import annotations

import dataclasses
import threading

import wrapt

_state = threading.local()  # .patched: this launch's module sets, None outside one
ANCHORS = ("_patch_lang", "_LangPatchScope", "GridExecutor", "interpreter_builder", "_get_np_dtype")
_shipped_options = []  # the builder's options before install (one entry once installed)


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
    """All three (idempotent). None when installed, else why not."""
    import triton.language as tl
    from triton.runtime import interpreter

    missing = missing_anchors(interpreter)
    if missing:
        return f"triton.runtime.interpreter has no {', '.join(missing)}"
    if isinstance(interpreter._patch_lang, wrapt.FunctionWrapper):
        return None
    builder = interpreter.interpreter_builder
    opts = builder.options
    unread = not getattr(opts, "debug", True) and getattr(opts, "sanitize_overflow", False)
    if unread and dataclasses.is_dataclass(opts):
        _shipped_options[:] = [opts]
        builder.options = dataclasses.replace(opts, sanitize_overflow=False)

    modules_of: dict = {}  # function -> _modules(fn): its globals, scanned once

    def patch_lang(wrapped, instance, args, kwargs):
        patched = getattr(_state, "patched", None)
        if patched is None:  # not inside a launch: as Triton does
            return wrapped(*args, **kwargs)
        (fn,) = args
        key = modules_of.get(fn)
        if key is None:
            key = modules_of[fn] = _modules(fn, tl)
        if key in patched:
            return interpreter._LangPatchScope()  # nothing to restore: already swapped
        patched.add(key)
        return wrapped(*args, **kwargs)

    known: dict = {}  # element type (every pointer one key) -> Triton's numpy dtype

    def np_dtype(wrapped, instance, args, kwargs):
        (tt,) = args
        elem = tt.element_ty if isinstance(tt, tl.block_type) else tt  # a block's: its element's
        key = tl.pointer_type if isinstance(elem, tl.pointer_type) else elem
        found = known.get(key)
        if found is None:
            found = known[key] = wrapped(tt)
        return found

    wrapt.wrap_function_wrapper(interpreter, "_patch_lang", patch_lang)
    wrapt.wrap_function_wrapper(interpreter, "GridExecutor.__call__", _launch)
    wrapt.wrap_function_wrapper(interpreter, "_get_np_dtype", np_dtype)
    return None


def uninstall() -> None:
    """Put Triton's own functions back (tests)."""
    from triton.runtime import interpreter

    for name in ("_patch_lang", "_get_np_dtype"):
        fn = getattr(interpreter, name)
        if isinstance(fn, wrapt.FunctionWrapper):
            setattr(interpreter, name, fn.__wrapped__)
    call = vars(interpreter.GridExecutor).get("__call__")
    if isinstance(call, wrapt.FunctionWrapper):
        interpreter.GridExecutor.__call__ = call.__wrapped__
    if _shipped_options:
        interpreter.interpreter_builder.options = _shipped_options.pop()
