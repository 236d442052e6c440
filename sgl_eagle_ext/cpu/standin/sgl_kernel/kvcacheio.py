"""`sgl_kernel.kvcacheio`: host-memory KV transfers (hierarchical cache), not used
by the CPU harness. SGLang 0.5.10.post1 imports its names unconditionally
(mem_cache/memory_pool_host.py); each one raises when called."""

from sgl_kernel.missing import missing_op


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return missing_op(f"sgl_kernel.kvcacheio.{name}")
