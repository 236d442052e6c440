"""Pure-PyTorch stand-in for the few `sgl_kernel` CPU ops SGLang calls on CPU.

The real CPU build of sgl-kernel is source-only (not on PyPI). The CPU harness
puts this package first on sys.path. Each op computes the real result, one
module per concern; tree build/verify call SGLang's own Triton kernels (run by
Triton's interpreter) where the release ships them, else a PyTorch reference
(tree_ref.py). Any other name, and any name of a placeholder submodule
(kvcacheio), can be imported but raises when called, so a gap shows up as a
clear error, never as a silent wrong value.
"""

from sgl_kernel.cache_ops import (
    assign_extend_cache_locs_cpu,
    assign_req_to_token_pool_cpu,
    copy_all_layer_kv_cache_cpu,
)
from sgl_kernel.missing import missing_op
from sgl_kernel.spec_ops import (
    assign_draft_cache_locs_contiguous_cpu,
    fill_accept_out_cache_loc_cpu,
    fill_bonus_tokens_cpu,
)
from sgl_kernel.tree_ops import build_tree_kernel_efficient_cpu, verify_tree_greedy_cpu

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "missing_op",
    "verify_tree_greedy_cpu",
]
__version__ = "0.0.0+eagle-ext-cpu-standin"
IS_EAGLE_EXT_STANDIN = True  # lets the harness check which sgl_kernel it got


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    import importlib
    import importlib.util

    # A submodule of the stand-in (kvcacheio, tree_ref) is the module itself:
    # `from sgl_kernel import kvcacheio` asks for the attribute first.
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    return missing_op(f"sgl_kernel.{name}")
