"""Scheduler-process fixes for releases whose EAGLE code has no CPU branch
(SGLang 0.5.10.post1, the v1 EAGLEWorker); newer releases need none of them.

Each fix finds out from SGLang's own code whether it is needed (so the same
harness serves every release), patches only then, and says in one line what
it did or which anchor it could not find. All are idempotent.
"""

from __future__ import annotations

import functools
import inspect
import sys

EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
LLAMA = "sglang.srt.models.llama"
_MARK = "_eagle_ext_cpu"


def _rebind(original, replacement, name: str) -> int:
    """Point every loaded sglang module that holds `original` as `name` at `replacement`."""
    count = 0
    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("sglang.") and getattr(mod, name, None) is original:
            setattr(mod, name, replacement)
            count += 1
    return count


def supply_tree_ops(say) -> None:
    """0.5.10's eagle_utils builds the tree with `sgl_build_tree_kernel_efficient`,
    imported only on CUDA/HIP (NameError on CPU), and its `verify_tree_greedy_func`
    silently does nothing off CUDA/HIP/NPU. Both get the stand-in's CPU ops."""
    try:
        from sglang.srt.speculative import eagle_utils
    except ImportError as exc:
        say(f"anchor missing: {EAGLE_UTILS} ({exc}); tree ops not supplied")
        return
    build = getattr(eagle_utils, "build_tree_kernel_efficient", None)
    verify = getattr(eagle_utils, "verify_tree_greedy_func", None)
    if build is None or verify is None:
        say(
            f"anchor missing: {EAGLE_UTILS}.build_tree_kernel_efficient / "
            "verify_tree_greedy_func; tree ops not supplied"
        )
        return
    import sgl_kernel

    done = []
    kernel_name = "sgl_build_tree_kernel_efficient"
    code = getattr(build, "__code__", None)
    if code is not None and kernel_name in code.co_names and not hasattr(eagle_utils, kernel_name):
        setattr(eagle_utils, kernel_name, sgl_kernel.build_tree_kernel_efficient_cpu)
        done.append("tree build")
    if getattr(verify, _MARK, False):
        return
    names = getattr(verify, "__code__", None)
    has_cpu_branch = names is None or any(
        n == "_is_cpu" or n.endswith("_cpu") for n in names.co_names
    )
    if verify.__module__ == EAGLE_UTILS and not has_cpu_branch:
        replacement = _cpu_verify(verify, sgl_kernel.verify_tree_greedy_cpu)
        eagle_utils.verify_tree_greedy_func = replacement
        _rebind(verify, replacement, "verify_tree_greedy_func")
        done.append("greedy tree verify")
    if done:
        say(f"{EAGLE_UTILS} has no CPU branch: {' and '.join(done)} from the sgl_kernel stand-in")


def _cpu_verify(original, cpu_op):
    """verify_tree_greedy_func with the original's signature, running the CPU op."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def verify_tree_greedy_func(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments

        def tree(stem):  # sgl-kernel spells retrive_*, newer SGLang retrieve_*
            return given.get(f"retrive_{stem}", given.get(f"retrieve_{stem}"))

        return cpu_op(
            predicts=given["predicts"],
            accept_index=given["accept_index"],
            accept_token_num=given["accept_token_num"],
            candidates=given["candidates"],
            retrive_index=tree("index"),
            retrive_next_token=tree("next_token"),
            retrive_next_sibling=tree("next_sibling"),
            target_predict=given["target_predict"],
        )

    setattr(verify_tree_greedy_func, _MARK, True)
    return verify_tree_greedy_func


def no_cuda_sync_in_set_embed(say) -> None:
    """0.5.10's Llama `set_embed` / `set_embed_and_head` (the draft takes the
    target's embeddings) end with torch.cuda.synchronize(), which asserts on a
    CPU-only torch. During those calls only, it is a no-op: nothing runs
    asynchronously on CPU. Any other synchronize still fails loudly."""
    import torch

    if torch.cuda.is_available():
        return
    try:
        from sglang.srt.models import llama
    except ImportError as exc:
        say(f"anchor missing: {LLAMA} ({exc}); set_embed not guarded")
        return
    cls = getattr(llama, "LlamaForCausalLM", None)
    if cls is None:
        say(f"anchor missing: {LLAMA}.LlamaForCausalLM; set_embed not guarded")
        return
    guarded = []
    for name in ("set_embed", "set_embed_and_head"):
        method = cls.__dict__.get(name)
        code = getattr(method, "__code__", None)
        if method is None or getattr(method, _MARK, False) or code is None:
            continue
        if "cuda" in code.co_names and "synchronize" in code.co_names:
            setattr(cls, name, _without_cuda_sync(method))
            guarded.append(name)
    if guarded:
        say(f"LlamaForCausalLM.{'/'.join(guarded)}: torch.cuda.synchronize is a no-op inside (CPU)")


def _without_cuda_sync(method):
    import torch

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        real = torch.cuda.synchronize
        torch.cuda.synchronize = lambda *a, **k: None
        try:
            return method(*args, **kwargs)
        finally:
            torch.cuda.synchronize = real

    setattr(wrapper, _MARK, True)
    return wrapper


def apply(say) -> None:
    supply_tree_ops(say)
    no_cuda_sync_in_set_embed(say)
