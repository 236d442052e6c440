"""Every anchor the profiling patches use exists in the pristine source of every
supported release (wheel downloaded without dependencies and cached, never
installed), as a method defined in that class's own body."""

from __future__ import annotations

import ast

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.tools import wheels

pytestmark = pytest.mark.harness  # release wheels (network or cache)


def defined_methods(source_root, module: str, cls: str) -> set[str] | None:
    path = source_root.parent.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return None


@pytest.mark.parametrize("release", releases.RELEASES, ids=lambda r: r.version)
def test_profile_anchors_exist_in_release_source(release):
    root = wheels.source(release.version)
    for worker in release.workers:
        for role, anchor in worker.anchors().items():
            module, qualname = anchor.split(":")
            cls, method = qualname.split(".")
            methods = defined_methods(root, module, cls)
            assert methods is not None, f"{release.version}: class {module}:{cls} missing ({role})"
            assert method in methods, f"{release.version}: {anchor} missing ({role})"


def test_anchor_check_detects_a_missing_method():
    root = wheels.source(releases.PRIMARY.version)
    assert "verify" in defined_methods(
        root, "sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2"
    )
    assert defined_methods(root, "sglang.srt.speculative.eagle_worker", "EAGLEWorker") is None
