"""Child of tests/test_interpreter_patching.py (TRITON_INTERPRET=1 before Triton loads):
one kernel whose loop calls device functions of its own module and of Triton's standard
library, launched with Triton's interpreter as it ships and with the harness's
once-per-launch patching. Prints what the test compares, as one JSON line."""

import json

import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from sgl_eagle_ext.cpu import interpreter_patching

PROGRAMS, N, STEPS, LAUNCHES = 4, 8, 3, 2


@triton.jit
def twice(x):
    return x * 2.0


@triton.jit
def kernel(X, Y, N: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, N)
    acc = tl.zeros([N], dtype=tl.float32)
    for i in range(STEPS):
        x = tl.load(X + pid * N + offs) + i
        acc += twice(x) - tl.max(x, 0) + tl.sum(x, 0) / N + tl.cdiv(i + 3, 2)
    tl.store(Y + pid * N + offs, acc)


raw = interpreter._patch_lang
calls = []
raw_dtype = interpreter._get_np_dtype
dtype_calls = []


def counted_dtype(tt):
    dtype_calls.append(str(tt))
    return raw_dtype(tt)


semantic = interpreter.interpreter_semantic
widened = []  # int64 casts: the overflow check's (the kernel has none of its own)


def counted_cast(value, dtype, *args, **kwargs):
    if dtype == tl.int64:
        widened.append(1)
    return type(semantic).cast(semantic, value, dtype, *args, **kwargs)


def counted(fn):
    calls.append(fn.__name__)
    return raw(fn)


def run() -> tuple[list, int, int, int]:
    """Outputs of LAUNCHES launches, Triton's patch calls, the int64 casts and Triton's
    dtype lookups."""
    calls.clear()
    widened.clear()
    dtype_calls.clear()
    x = torch.arange(PROGRAMS * N, dtype=torch.float32).reshape(PROGRAMS, N).sin()
    outs = []
    for _ in range(LAUNCHES):
        y = torch.empty_like(x)
        kernel[(PROGRAMS,)](x, y, N=N, STEPS=STEPS)
        outs.append(y.tolist())
    return outs, len(calls), len(widened), len(dtype_calls)


interpreter._patch_lang = counted
semantic.cast = counted_cast
interpreter._get_np_dtype = counted_dtype
plain, plain_calls, plain_widened, plain_lookups = run()
assert interpreter_patching.install() is None
assert interpreter_patching.install() is None  # idempotent: one wrapper
once, once_calls, once_widened, once_lookups = run()
interpreter_patching.uninstall()
after, _, after_widened, after_lookups = run()  # Triton as shipped, on what the others left
back = interpreter._patch_lang is counted and interpreter._get_np_dtype is counted_dtype
back = back and "__wrapped__" not in dir(vars(interpreter.GridExecutor)["__call__"])
print(
    json.dumps(
        {
            "equal": plain == once == after,
            "plain_calls": plain_calls,
            "once_calls": once_calls,
            "uninstalled": back,
            "widened": [plain_widened, once_widened, after_widened],
            "lookups": [plain_lookups, once_lookups, after_lookups],
            "launches": LAUNCHES,
            "device_calls": PROGRAMS * STEPS * 4 * LAUNCHES,
        }
    )
)
