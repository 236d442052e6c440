"""Let torchvision import on a CPU-only torch build whose torchvision is CUDA-linked.

SGLang imports torchvision at module level (`from torchvision.io import
decode_jpeg` in sglang.srt.utils.common). The harness of SGLang 0.5.10.post1
runs on torch 2.13.0+cpu, and the only torchvision 0.28.0 on the package index
links against CUDA torch: its native `_C` extension cannot load, which
torchvision tolerates, except that `torchvision._meta_registrations` registers
fake kernels for `torchvision::nms` and `torchvision::qnms` without checking,
and that fails with "operator torchvision::nms does not exist".

`install()` adds an import hook that runs just before that module loads (after
`torchvision.extension` has tried to load `_C`): only if `_C` did not load, it
declares the two operator schemas (no kernels: calling nms raises, as every
torchvision native op already does without `_C`). With a working `_C` (the
primary release's CUDA torch build) it does nothing.

The CPU installer puts a .pth file in the harness's venv that calls `install()`
in every interpreter of that venv (server, scheduler, detokenizer, tests).
Standard library only until torchvision itself is being imported.
"""

from __future__ import annotations

import sys

HOOKED = "torchvision._meta_registrations"
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
PTH_NAME = "sgl_eagle_ext_torchvision_ops.pth"
# One line: a .pth line starting with "import" is executed at interpreter start.
# If the package is not importable (uninstalled), nothing happens.
PTH_LINE = (
    "import importlib.util as _u; _u.find_spec('sgl_eagle_ext') and "
    "__import__('sgl_eagle_ext.cpu.torchvision_ops').cpu.torchvision_ops.install()\n"
)

_library = None  # keeps the torch.library.Library (and its definitions) alive


class _BeforeMetaRegistrations:
    """Meta-path finder that never finds anything: it only acts before HOOKED loads."""

    def find_spec(self, name, path=None, target=None):
        if name == HOOKED:
            declare_missing_ops()
        return None


def declare_missing_ops() -> bool:
    """Declare the schemas torchvision registers fakes for, if its _C did not load."""
    global _library
    extension = sys.modules.get("torchvision.extension")
    if _library is not None or extension is None or extension._has_ops():
        return False
    import torch

    _library = torch.library.Library("torchvision", "DEF")
    for schema in SCHEMAS:
        _library.define(schema)
    print(
        "[sgl_eagle_ext.cpu] torchvision's native ops did not load (CUDA-linked build on "
        "CPU torch); declared nms/qnms so that torchvision imports",
        file=sys.stderr,
    )
    return True


def install() -> None:
    if "torchvision" in sys.modules:
        return  # too late or already done; an import that failed stays failed
    if not any(isinstance(f, _BeforeMetaRegistrations) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeMetaRegistrations())
