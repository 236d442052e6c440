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


def counted(fn):
    calls.append(fn.__name__)
    return raw(fn)


def run() -> tuple[list, int]:
    """Outputs of LAUNCHES launches and Triton's patch calls."""
    calls.clear()
    x = torch.arange(PROGRAMS * N, dtype=torch.float32).reshape(PROGRAMS, N).sin()
    outs = []
    for _ in range(LAUNCHES):
        y = torch.empty_like(x)
        kernel[(PROGRAMS,)](x, y, N=N, STEPS=STEPS)
        outs.append(y.tolist())
    return outs, len(calls)


interpreter._patch_lang = counted
plain, plain_calls = run()
assert interpreter_patching.install() is None
assert interpreter_patching.install() is None  # idempotent: one wrapper
once, once_calls = run()
interpreter_patching.uninstall()
after, _ = run()  # Triton as shipped, on what the once-patched launches left
back = interpreter._patch_lang is counted and "__wrapped__" not in dir(
    vars(interpreter.GridExecutor)["__call__"]
)
print(
    json.dumps(
        {
            "equal": plain == once == after,
            "plain_calls": plain_calls,
            "once_calls": once_calls,
            "uninstalled": back,
            "launches": LAUNCHES,
            "device_calls": PROGRAMS * STEPS * 4 * LAUNCHES,
        }
    )
)
