"""The one filter for an environment that leaves this process toward a helper that is
not the server itself (the warm probe's socket, the probe's request, its subprocess).

An allow-list, not a deny-list: only the variables the Python stack under SGLang may
read (the interpreter, locale and paths; SGLang's, torch's, transformers', the hub's,
the accelerator runtimes'; this project's own switches) pass, and of those, none whose
name says secret (HF_TOKEN, EAGLE_EXT_API_KEY). Anything else (DATABASE_URL, MYSQL_PWD,
AWS_*, a shell's history) stays here: a verdict about a launch cannot depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping

from sgl_eagle_ext.common.redaction import is_secret_name

NAMES = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TEMP", "TMP", "TZ"),
        *("LANG", "LANGUAGE", "TERM", "PWD", "VIRTUAL_ENV", "LD_LIBRARY_PATH"),
        *("TOKENIZERS_PARALLELISM", "SAFETENSORS_FAST_GPU", "MODELSCOPE_CACHE"),
    }
)
PREFIXES = (
    *("LC_", "XDG_", "PYTHON", "CONDA_"),
    *("SGLANG_", "SGL_", "EAGLE_EXT_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_"),
    *("TORCH", "PYTORCH_", "TRITON_", "CUDA_", "CUDNN_", "NVIDIA_", "NCCL_", "NVTE_"),
    *("HIP_", "ROCR_", "ROCM_", "HSA_", "MIOPEN_", "OMP_", "MKL_", "KMP_", "OPENBLAS_"),
    *("FLASHINFER_", "VLLM_", "GLOO_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK"),
)


def allowed_name(name: str) -> bool:
    return (name in NAMES or name.startswith(PREFIXES)) and not is_secret_name(name)


def allowed(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with only the allowed variables (see the module's text)."""
    return {k: v for k, v in env.items() if allowed_name(k)}
