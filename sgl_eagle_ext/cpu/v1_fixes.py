"""Scheduler-process fixes for releases whose EAGLE code has no CPU branch
(SGLang 0.5.10.post1, the v1 EAGLEWorker); newer releases need none of them.

Each fix finds out from SGLang's own code whether it is needed (so the same
harness serves every release), patches only then, through the patching base
(in_sglang_base/patching.py: all anchors first, idempotent, revert() undoes them), and
says in one line what it did or which anchor it could not find. Registered in the
in-process registry (FEATURE, below): every scheduler of a CPU-harness server, after
the harness's own fixes, when the release has the v1 worker (or is unknown).
"""

from __future__ import annotations

import inspect
import sys

from sgl_eagle_ext.cpu import harness
from sgl_eagle_ext.in_sglang_base import patching, registry

EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
LLAMA = "sglang.srt.models.llama"
KERNEL = "sgl_build_tree_kernel_efficient"  # the name 0.5.10's tree build calls
# Installed and reverted through the patching base (one line when an anchor is missing).
TREE_OPS = patching.Patches("v1 fix (tree ops)", off="not supplied")
SET_EMBED = patching.Patches("v1 fix (set_embed)", off="not guarded")


def _holders(original, name: str) -> list[str]:
    """Every loaded sglang module that holds `original` as `name` (imported by name)."""
    return [
        mod_name
        for mod_name, mod in list(sys.modules.items())
        if mod_name.startswith("sglang.") and getattr(mod, name, None) is original
    ]


def supply_tree_ops(say) -> None:
    """0.5.10's eagle_utils builds the tree with `sgl_build_tree_kernel_efficient`,
    imported only on CUDA/HIP (NameError on CPU), and its `verify_tree_greedy_func`
    silently does nothing off CUDA/HIP/NPU. Both get the stand-in's CPU ops."""
    TREE_OPS.sink = say
    if TREE_OPS.installed:
        return
    try:
        eagle_utils, _, build = patching.resolve(f"{EAGLE_UTILS}:build_tree_kernel_efficient")
        _, _, verify = patching.resolve(f"{EAGLE_UTILS}:verify_tree_greedy_func")
    except LookupError as e:
        TREE_OPS.refuse(f"anchor missing: {e}")
        return
    import sgl_kernel

    patches, done = [], []
    code = getattr(build, "__code__", None)
    if code is not None and KERNEL in code.co_names and not hasattr(eagle_utils, KERNEL):
        cpu_build = sgl_kernel.build_tree_kernel_efficient_cpu
        patches.append(patching.Set(f"{EAGLE_UTILS}:{KERNEL}", cpu_build, create=True))
        done.append("tree build")
    names = getattr(verify, "__code__", None)
    has_cpu_branch = names is None or any(
        n == "_is_cpu" or n.endswith("_cpu") for n in names.co_names
    )
    if getattr(verify, "__module__", None) == EAGLE_UTILS and not has_cpu_branch:
        wrapper = _cpu_verify(verify, sgl_kernel.verify_tree_greedy_cpu)
        patches += [
            patching.Wrap(f"{m}:verify_tree_greedy_func", wrapper, in_capture=True)
            for m in _holders(verify, "verify_tree_greedy_func")
        ]
        done.append("greedy tree verify")
    if patches:
        TREE_OPS.install(
            patches,
            on=f"{EAGLE_UTILS} has no CPU branch: {' and '.join(done)} from the sgl_kernel "
            "stand-in",
        )


def _cpu_verify(original, cpu_op):
    """A wrapper making verify_tree_greedy_func (the original's signature) run the CPU op."""
    signature = inspect.signature(original)

    def verify_on_cpu(wrapped, instance, args, kwargs):
        given = signature.bind(*args, **kwargs).arguments

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

    return verify_on_cpu


def no_cuda_sync_in_set_embed(say) -> None:
    """0.5.10's Llama `set_embed` / `set_embed_and_head` (the draft takes the
    target's embeddings) end with torch.cuda.synchronize(), which asserts on a
    CPU-only torch. During those calls only, it is a no-op: nothing runs
    asynchronously on CPU. Any other synchronize still fails loudly."""
    import torch

    SET_EMBED.sink = say
    if torch.cuda.is_available() or SET_EMBED.installed:
        return
    try:
        _, _, cls = patching.resolve(f"{LLAMA}:LlamaForCausalLM")
    except LookupError as e:
        SET_EMBED.refuse(f"anchor missing: {e}")
        return
    guarded = []
    for name in ("set_embed", "set_embed_and_head"):
        code = getattr(vars(cls).get(name), "__code__", None)
        if code is not None and "cuda" in code.co_names and "synchronize" in code.co_names:
            guarded.append(name)
    if guarded:
        SET_EMBED.install(
            [
                patching.Wrap(f"{LLAMA}:LlamaForCausalLM.{n}", _without_cuda_sync, in_capture=True)
                for n in guarded
            ],
            on=f"LlamaForCausalLM.{'/'.join(guarded)}: torch.cuda.synchronize is a no-op "
            "inside (CPU)",
        )


def _without_cuda_sync(wrapped, instance, args, kwargs):
    import torch

    real = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        return wrapped(*args, **kwargs)
    finally:
        torch.cuda.synchronize = real


def apply(say) -> None:
    supply_tree_ops(say)
    no_cuda_sync_in_set_embed(say)


def revert() -> None:
    """Every fix undone, newest first."""
    SET_EMBED.uninstall()
    TREE_OPS.uninstall()


def _in_scheduler(ctx) -> None:
    release = harness.installed_release()
    if release is None or release.spec_worker == "v1":
        apply(harness.say)  # each fix checks SGLang's code first


FEATURE = registry.register(
    registry.Feature(
        "v1 fixes",
        enabled=harness.enabled,  # the CPU harness's switch
        hooks={registry.SCHEDULER: _in_scheduler},
        order=registry.PLATFORM + 1,  # after the harness (sgl_kernel stand-in, tree mask)
        plugin=False,
    )
)
