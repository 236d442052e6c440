"""benchmarks/gpu_check_kernels.py: SGLang's verify-attention kernels copied from the
installed SGLang (never committed) and loaded from that folder, as the GPU machine (no
SGLang there) loads them. The loading path runs here under Triton's CPU interpreter, in
a fresh process that never imports the real SGLang: each kernel once on a tiny shape,
against SGLang's own extend kernel."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check_kernels as gk  # noqa: E402

pytestmark = pytest.mark.harness  # the installed SGLang is the source

# Run in a fresh interpreter: the copies under SGLang's module names, the stand-ins, no
# real SGLang. fp32, 2 requests, a 128-token prefix (the interpreter is slow; below 97
# tokens verify_splitkv leaves a split unwritten and its combine reads that scratch).
RUN = """
import json, sys, torch
from sgl_eagle_ext.cpu import interpreter_patching
interpreter_patching.install()  # the interpreter's unread work off (the harness's own)
sys.path.insert(0, sys.argv[2])
import gpu_check_kernels as gk
mods, manifest = gk.load(sys.argv[1])
out = {"sglang_file": getattr(sys.modules["sglang"], "__file__", None),
       "files": {k: m.__file__ for k, m in mods.items()}, "rows": []}
g = torch.Generator().manual_seed(0)
for heads, qk, v in [(2, 576, 512), (4, 64, 64)]:
    for chain in (1, 3):
        x = gk.verify_inputs(torch, 2, 128, chain, heads, qk, v, dtype=torch.float32,
                             device="cpu", g=g)
        ref = torch.empty(2 * chain, heads, v)
        gk.call_extend(mods, x, ref)
        row = {"qk": qk, "chain": chain}
        for k in ("verify_mla", "verify_splitkv"):
            o = torch.full_like(ref, float("nan"))
            ran = gk.call_verify(mods, k, x, o)
            row[k] = float((o - ref).abs().max()) if ran else "refused"
        if chain == 1:
            o = torch.full_like(ref, float("nan"))
            gk.call_decode(mods, x, x["q"], o, gk.decode_state(torch, mods, x, heads, v, 0, "cpu"))
            row["decode"] = float((o - ref).abs().max())
        row["ref_max"] = float(ref.abs().max())
        out["rows"].append(row)
# the timed section's own path, one pass per kernel (timing is the GPU's)
res = gk.run(torch, None, mods, shapes=[(2, 128, 1), (2, 128, 4)], gqa=False, device="cpu",
             bench=lambda fn: (fn(), 0.5)[1], on_row=lambda o: out.setdefault("saved", 0))
out["run"] = res
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernels")
    manifest = gk.prepare(folder)
    return folder, manifest


def test_prepare_copies_the_kernels_as_shipped(kernels):
    folder, manifest = kernels
    assert manifest["sglang"] == importlib.metadata.version("sglang")
    assert set(gk.KERNELS) <= set(manifest["files"])  # plus what they import (score_mod)
    src = gk._sglang_dir() / "kernels" / "ops" / "attention"
    for name in manifest["files"]:
        assert (folder / f"{name}.py").read_bytes() == (src / f"{name}.py").read_bytes()
    assert manifest["shimmed"] == sorted(gk.SHIMS)
    # what SGLang says about the envs the copies read, for the stand-in
    assert manifest["envs"]["SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS"] == {
        "type": "EnvBool",
        "default": False,
    }


def test_the_copies_load_without_sglang_and_match_the_extend_kernel(kernels):
    folder, _ = kernels
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", RUN, str(folder), str(ROOT / "benchmarks")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["sglang_file"] is None  # the stand-in package, not the installed SGLang
    assert all(Path(f).parent == folder for f in out["files"].values())
    for row in out["rows"]:
        assert row["ref_max"] > 0.1, row
        if row["qk"] == 576:
            # verify_splitkv refuses MLA by its own can_handle (it would fault there)
            assert row["verify_splitkv"] == "refused", row
        else:
            assert row["verify_splitkv"] < 1e-5, row  # fp32 partials: rounding only
        # verify_mla keeps its split partials in bf16 (its _alloc): 8 mantissa bits,
        # a relative step of 2^-8 on outputs of magnitude ~1
        assert row["verify_mla"] < 1.5e-2, row
        if row["chain"] == 1:
            assert row["decode"] < 1e-5, row
    run = out["run"]
    assert [(r["bs"], r["context"], r["chain"]) for r in run["rows"]] == [(2, 128, 1), (2, 128, 4)]
    one, four = run["rows"]
    assert one["verify_splitkv_refused"] and one["verify_splitkv_ms"] is None  # MLA
    assert one["verify_mla_max_abs_diff"] < 1.5e-2 and one["decode_max_abs_diff"] < 1e-5
    assert one["extend_x61_ms"] == 0.5 * 61 and "decode_ms" not in four
    assert "saved" in out and not run["skipped_for_time"]


def test_prepare_refuses_a_folder_with_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(gk.KernelsError, match="other files in it"):
        gk.prepare(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_prepare_cli_says_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check_kernels.py"),
            "prepare",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"gpu_check_kernels: {tmp_path}: a folder with other files")


def test_load_refuses_an_unprepared_or_changed_folder(tmp_path, kernels):
    with pytest.raises(gk.KernelsError, match="no MANIFEST.json; prepare it"):
        gk.read_manifest(tmp_path)
    folder, manifest = kernels
    changed = tmp_path / "changed"
    changed.mkdir()
    for f in folder.iterdir():
        (changed / f.name).write_bytes(f.read_bytes())
    (changed / "verify_mla.py").write_text("# edited\n")
    with pytest.raises(gk.KernelsError, match="verify_mla.py: missing or changed"):
        gk.read_manifest(changed)


def test_an_import_with_no_stand_in_is_refused(tmp_path):
    pkg = tmp_path / "kernels" / "ops" / "attention"
    pkg.mkdir(parents=True)
    (pkg / "extend_attention.py").write_text(
        "from sglang.kernels.ops.attention.helper import x\n"
        "from sglang.srt.utils import is_hip, is_npu\n"
    )
    (pkg / "helper.py").write_text("x = 1\n")
    with pytest.raises(gk.KernelsError, match="imports is_npu from sglang.srt.utils"):
        gk.plan_copy(tmp_path, kernels=("extend_attention",))
    (pkg / "extend_attention.py").write_text("import sglang.srt.server_args\n")
    with pytest.raises(gk.KernelsError, match="imports sglang.srt.server_args: neither"):
        gk.plan_copy(tmp_path, kernels=("extend_attention",))
