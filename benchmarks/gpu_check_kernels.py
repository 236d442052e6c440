"""gpu_check's kernel section: SGLang's own verify-attention kernels at Kimi-K2.5 TP 8 shapes.

The GPU machine has torch and Triton but no SGLang and no package index, so the check
carries the kernels' source, copied from the installed SGLang into a folder that is never
committed (SGLang's code stays SGLang's):

    .venv/bin/python benchmarks/gpu_check_kernels.py prepare .gpu-check-kernels
    python3 benchmarks/gpu_check.py --kernels .gpu-check-kernels     # on the GPU

`prepare` copies the kernel modules (KERNELS) and every module of SGLang's attention
kernel package they import, byte for byte, and writes MANIFEST.json: the SGLang
version, each file's sha256, and what SGLang itself says about the few SGLang names
they import from outside that package (the defaults of the `envs` fields they read).
`load` puts small stand-ins for those names (written here, SHIMS) and an import path to
the folder in sys.modules, then imports the copies under their own module names, so the
files run unmodified. An import neither copied nor stood in for fails `prepare` with
its name (a new SGLang release that needs more is refused, not half-loaded).

`run` times, per (batch, context, chain) at MLA 576/512 with 8 query heads and one
latent KV head per rank (Kimi-K2.5's 64 heads at TP 8), bf16:
  extend        extend_attention_fwd as SGLang's Triton backend calls it for a target
                verify today (the chain's tree mask as custom_mask, causal)
  verify_mla    verify_shared_kv_fwd (verify_mla.py), the grouped-head split-KV verify
  verify_splitkv verify_splitkv_fwd (verify_splitkv.py): refuses MLA by its own
                can_handle; recorded as refused (and timed on a GQA row beside)
  decode        decode_attention_fwd for a 1-token chain, its KV splits chosen by
                SGLang's own get_num_kv_splits_triton (metadata.py) under the MLA cap
each the median of triton.testing.do_bench, per layer and x61 (the 61-layer target's
verify attention per forward), and each verify kernel's largest difference from the
extend kernel's output. A time budget skips what is left (said in the figures).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
import types
from pathlib import Path

PACKAGE = "sglang.kernels.ops.attention"
KERNELS = ("extend_attention", "verify_splitkv", "verify_mla", "decode_attention", "metadata")
MANIFEST = "MANIFEST.json"
LAYERS = 61  # Kimi-K2.5's decoder layers: each figure x61 is one verify forward's attention
# Kimi-K2.5 at TP 8: 64 query heads / 8 ranks, absorbed MLA (kv_lora_rank 512 + rope 64)
HEADS, QK_DIM, V_DIM = 8, 576, 512
BATCHES = (1, 4, 16, 64)
CONTEXTS = (512, 2048, 8192, 32768)
CHAINS = (1, 4, 6)
MAX_CONTEXT = 262144  # Kimi-K2.5's context length: the backend's MLA split cap reads it
NUM_KV_SPLITS = 8  # --triton-attention-num-kv-splits default (SGLang 0.5.23)

# SGLang names the kernels import from outside their package, and the stand-ins load()
# provides: NVIDIA or the CPU interpreter, never ROCm's gfx95/gfx1250 paths.
SHIMS: dict[str, tuple[str, ...]] = {
    "sglang.srt.utils": (
        "is_hip",
        "is_cuda",
        "is_gfx95_supported",
        "is_gfx1250_supported",
        "get_device_core_count",
    ),
    "sglang.srt.environ": ("envs",),
    "sglang.srt.runtime_context": ("get_exec",),
}


class KernelsError(Exception):
    """A user-facing problem with the kernels folder: one line, no traceback."""


# -- prepare: on a machine with SGLang -------------------------------------------------


def _sglang_dir() -> Path:
    spec = importlib.util.find_spec("sglang")  # locates the package, runs none of it
    if spec is None or not spec.submodule_search_locations:
        raise KernelsError("SGLang is not installed here: run prepare with the SGLang venv")
    return Path(list(spec.submodule_search_locations)[0])


def _imports(source: str) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every `import`/`from` anywhere in the file (nested ones too)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
    return out


def plan_copy(root: Path, kernels=KERNELS) -> tuple[dict[str, Path], set[str]]:
    """module name (in PACKAGE) -> source file under `root` (the sglang package folder),
    and the shimmed modules they use."""
    files: dict[str, Path] = {}
    shimmed: set[str] = set()
    todo = list(kernels)
    while todo:
        name = todo.pop()
        if name in files:
            continue
        path = root.joinpath(*PACKAGE.split(".")[1:], f"{name}.py")
        if not path.is_file():
            raise KernelsError(f"{path}: not in this SGLang (a release without {name})")
        files[name] = path
        for module, names in _imports(path.read_text()):
            if not module.startswith("sglang"):
                continue
            if module.startswith(PACKAGE + "."):
                todo.append(module[len(PACKAGE) + 1 :])
            elif module in SHIMS:
                missing = sorted(set(names) - set(SHIMS[module]))
                if missing:
                    raise KernelsError(
                        f"{path.name} imports {', '.join(missing)} from {module}: no stand-in "
                        "for it in benchmarks/gpu_check_kernels.py SHIMS (add one)"
                    )
                shimmed.add(module)
            else:
                raise KernelsError(
                    f"{path.name} imports {module}: neither a kernel file nor stood in for "
                    "(benchmarks/gpu_check_kernels.py SHIMS)"
                )
    return files, shimmed


def _env_defaults(sources: list[str]) -> dict[str, dict]:
    """What SGLang says about each envs.<NAME> the copies read: its type and default."""
    wanted = sorted({m for s in sources for m in re.findall(r"\benvs\.([A-Z][A-Z0-9_]+)", s)})
    if not wanted:
        return {}
    from sglang.srt.environ import envs  # the oracle, on the preparing machine

    out = {}
    for name in wanted:
        field = next((vars(c)[name] for c in type(envs).__mro__ if name in vars(c)), None)
        if field is None:
            raise KernelsError(f"SGLang's envs has no {name}, which a kernel reads")
        default = field.default() if callable(field.default) else field.default
        out[name] = {"type": type(field).__name__, "default": default}
    return out


def prepare(dest: Path, root: Path | None = None) -> dict:
    """Copy the kernel files into `dest` (new, empty, or a folder prepared before)."""
    root = root or _sglang_dir()
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise KernelsError(f"{dest}: exists and is not a folder; name a new folder")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        raise KernelsError(
            f"{dest}: a folder with other files in it (no {MANIFEST}); name a new or empty "
            "folder, nothing was written"
        )
    files, shimmed = plan_copy(root)
    sources = [p.read_text() for p in files.values()]
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    manifest = {
        "sglang": version,
        "package": PACKAGE,
        "source": str(root),
        "files": {},
        "shimmed": sorted(shimmed),
        "envs": _env_defaults(sources),
    }
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in sorted(files.items()):
        shutil.copyfile(path, dest / path.name)
        manifest["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


# -- load: on the GPU machine (no SGLang) ----------------------------------------------


def read_manifest(folder: Path) -> dict:
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise KernelsError(
            f"{folder}: no {MANIFEST}; prepare it on a machine with SGLang: "
            f"python benchmarks/gpu_check_kernels.py prepare {folder}"
        )
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise KernelsError(
            f"{path}: not a manifest prepare wrote ({e}); prepare it again"
        ) from None
    for name, digest in files.items():
        f = folder / f"{name}.py"
        if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != digest:
            raise KernelsError(f"{f}: missing or changed since prepare; prepare it again")
    return manifest


class _EnvField:
    """envs.<NAME>.get(): the environment's value, else SGLang's default (MANIFEST)."""

    def __init__(self, name: str, kind: str, default):
        self.name, self.kind, self.default = name, kind, default

    def get(self):
        value = os.environ.get(self.name)
        if value is None:
            return self.default
        if self.kind.startswith("EnvBool"):
            return value.lower() in ("true", "1", "yes", "y")
        if self.kind.startswith("EnvFloat"):
            return float(value)
        if self.kind.startswith("EnvInt"):
            return int(value)
        return value


def _shim_modules(folder: Path, manifest: dict) -> dict[str, types.ModuleType]:
    import torch

    def package(name: str, path: list[str]) -> types.ModuleType:
        m = types.ModuleType(name, "stand-in: benchmarks/gpu_check_kernels.py")
        m.__path__ = path
        return m

    utils = types.ModuleType("sglang.srt.utils")
    utils.is_hip = lambda: torch.version.hip is not None
    utils.is_cuda = lambda: torch.cuda.is_available() and torch.version.cuda is not None
    utils.is_gfx95_supported = lambda: False  # ROCm paths: not this check's machines
    utils.is_gfx1250_supported = lambda: False
    utils.get_device_core_count = lambda device_id=0: (
        torch.cuda.get_device_properties(device_id).multi_processor_count
        if torch.cuda.is_available()
        else 0
    )
    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = types.SimpleNamespace(
        **{
            n: _EnvField(n, spec["type"], spec["default"])
            for n, spec in manifest.get("envs", {}).items()
        }
    )
    runtime = types.ModuleType("sglang.srt.runtime_context")

    def get_exec():  # SGLang's answer before a server publishes its config
        raise ValueError("no server here: the kernels run outside SGLang")

    runtime.get_exec = get_exec
    mods = {
        "sglang": package("sglang", []),
        "sglang.srt": package("sglang.srt", []),
        "sglang.kernels": package("sglang.kernels", []),
        "sglang.kernels.ops": package("sglang.kernels.ops", []),
        PACKAGE: package(PACKAGE, [str(folder.resolve())]),
        "sglang.srt.utils": utils,
        "sglang.srt.environ": environ,
        "sglang.srt.runtime_context": runtime,
    }
    mods["sglang"].srt, mods["sglang"].kernels = mods["sglang.srt"], mods["sglang.kernels"]
    mods["sglang.kernels"].ops = mods["sglang.kernels.ops"]
    mods["sglang.kernels.ops"].attention = mods[PACKAGE]
    return mods


def load(folder: Path) -> tuple[dict[str, types.ModuleType], dict]:
    """The copied kernel modules, imported under SGLang's names from `folder`."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    real = sys.modules.get("sglang")
    if real is not None and getattr(real, "__file__", None):
        raise KernelsError(
            "a real SGLang is imported in this process: load the copies in a fresh one"
        )
    sys.modules.update(_shim_modules(folder, manifest))
    mods = {name: importlib.import_module(f"{PACKAGE}.{name}") for name in KERNELS}
    for name, m in mods.items():
        if Path(m.__file__).resolve().parent != folder.resolve():
            raise KernelsError(f"{PACKAGE}.{name} loaded from {m.__file__}, not {folder}")
    return mods, manifest


# -- inputs: a verify batch as SGLang's Triton backend hands it to the kernels -------------


def verify_inputs(torch, bs, ctx, chain, heads, qk, v, h_kv=1, dtype=None, device="cuda", g=None):
    """q/k/v of the chain, the KV pool (prefix + chain), the index arrays, the tree mask of
    a topk-1 chain (every prefix token, then causal among the chain) as SGLang builds it."""
    dtype = dtype or torch.bfloat16
    rows = bs * chain
    pool = bs * (ctx + chain)
    mla = h_kv == 1 and qk != v

    def rnd(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=g)

    k_buffer = rnd(pool, h_kv, qk)
    v_buffer = k_buffer[..., :v] if mla else rnd(pool, h_kv, v)  # MLA: the latent's view
    k_extend = rnd(rows, h_kv, qk)
    v_extend = k_extend[..., :v].contiguous() if mla else rnd(rows, h_kv, v)
    starts = torch.arange(bs, device=device, dtype=torch.int64) * (ctx + chain)
    prefix = (starts[:, None] + torch.arange(ctx, device=device)).reshape(-1)
    mine = (starts[:, None] + ctx + torch.arange(chain, device=device)).reshape(-1)
    k_buffer[mine] = k_extend  # the backend writes the chain's KV before attention
    if not mla:
        v_buffer[mine] = v_extend
    row = torch.ones(chain, ctx + chain, dtype=torch.bool, device=device)
    row[:, ctx:] = torch.tril(torch.ones(chain, chain, dtype=torch.bool, device=device))
    ar = torch.arange(bs + 1, device=device, dtype=torch.int32)
    return {
        "q": rnd(rows, heads, qk),
        "k_extend": k_extend,
        "v_extend": v_extend,
        "k_buffer": k_buffer,
        "v_buffer": v_buffer,
        "qo_indptr": ar * chain,
        "kv_indptr": ar * ctx,
        "kv_indices": prefix.to(torch.int64),
        "custom_mask": row.reshape(-1).repeat(bs),
        "mask_indptr": (ar * (chain * (ctx + chain))).to(torch.int64),
        "chain": chain,
        "decode_indptr": ar * (ctx + 1),
        "decode_indices": (starts[:, None] + torch.arange(ctx + 1, device=device))
        .reshape(-1)
        .to(torch.int64),
    }


def _verify_args(x, o):
    return (
        x["q"],
        x["k_extend"],
        x["v_extend"],
        o,
        x["k_buffer"],
        x["v_buffer"],
        x["qo_indptr"],
        x["kv_indptr"],
        x["kv_indices"],
        x["custom_mask"],
        True,  # causal: what the backend passes for a decoder's verify
        x["mask_indptr"],
        x["chain"],
        1.0,
        1.0,
    )


def call_extend(mods, x, o):
    mods["extend_attention"].extend_attention_fwd(*_verify_args(x, o))


def call_verify(mods, kernel, x, o) -> bool:
    """verify_mla / verify_splitkv: True when it ran, False when its can_handle refused."""
    fn = (
        mods["verify_mla"].verify_shared_kv_fwd
        if kernel == "verify_mla"
        else mods["verify_splitkv"].verify_splitkv_fwd
    )
    bs = x["qo_indptr"].shape[0] - 1
    return bool(fn(*_verify_args(x, o), max_bs=bs))


def mla_max_kv_splits(sm_count: int, max_context: int = MAX_CONTEXT) -> int:
    """The Triton backend's MLA decode split cap (triton_backend._mla_decode_kv_splits_cap,
    SGLang 0.5.23): at least the flag's 8, else the SM count or the context's 32-token
    blocks, each rounded up to a power of two, whichever is smaller."""
    if sm_count <= 0:
        return NUM_KV_SPLITS

    def p2(n):
        return 1 << max(0, math.ceil(math.log2(n)))

    return max(NUM_KV_SPLITS, min(p2(sm_count), p2(math.ceil(max_context / 32))))


def decode_state(torch, mods, x, heads, v, cores: int, device="cuda"):
    """attn_logits / attn_lse / num_kv_splits as the backend makes them for a decode."""
    bs = x["qo_indptr"].shape[0] - 1
    max_splits = mla_max_kv_splits(cores)
    splits = torch.empty(bs, dtype=torch.int32, device=device)
    seq_lens = (x["decode_indptr"][1:] - x["decode_indptr"][:-1]).to(torch.int32)
    if cores > 0:  # SGLang's own split rule (the backend passes 256 below 256 requests)
        mods["metadata"].get_num_kv_splits_triton[(1,)](
            splits, seq_lens, bs, 1, heads, 1, max_splits, cores, MAX_NUM_SEQ=256
        )
    else:  # the backend's static path when it knows no core count
        splits.fill_(max_splits)
    logits = torch.empty(bs, heads, max_splits, v, dtype=torch.float32, device=device)
    lse = torch.empty(bs, heads, max_splits, dtype=torch.float32, device=device)
    return logits, lse, splits, max_splits


def call_decode(mods, x, q, o, state, use_pdl=False):
    logits, lse, splits, max_splits = state
    mods["decode_attention"].decode_attention_fwd(
        q,
        x["k_buffer"],
        x["v_buffer"],
        o,
        x["decode_indptr"],
        x["decode_indices"],
        logits,
        lse,
        splits,
        max_splits,
        1.0 / math.sqrt(q.shape[-1]),
        1.0,
        1.0,
        has_mla=q.shape[-1] != o.shape[-1],
        use_pdl=use_pdl,
    )


def decode_view(torch, x):
    """A 1-token chain as a decode: its query, its KV already in the pool (the decode
    indices cover prefix + the new token)."""
    return x["q"]


# -- the timed section ------------------------------------------------------------------


def _bench(triton, torch, fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median"))


def shape_order() -> list[tuple[int, int, int]]:
    """(batch, context, chain), the corners first (batch 1 and 64 at 2k and 32k), so a run
    cut short by the budget still spans the grid."""
    every = [(b, c, L) for c in CONTEXTS for b in BATCHES for L in CHAINS]
    first = [s for s in every if s[0] in (1, 64) and s[1] in (2048, 32768)]
    return first + [s for s in every if s not in first]


def run(
    torch,
    triton,
    mods,
    budget_s: float = 200.0,
    shapes=None,
    gqa=True,
    device="cuda",
    bench=None,
    on_row=None,
) -> dict:
    """Figures for every shape that fits in the budget (the rest listed as skipped);
    `on_row(out)` after each shape (the caller saves what was measured)."""
    t0 = time.monotonic()
    if device == "cuda":
        dev = torch.cuda.current_device()
        cores = torch.cuda.get_device_properties(dev).multi_processor_count
        use_pdl = torch.cuda.get_device_capability(dev)[0] >= 9  # is_arch_support_pdl
        dtype = torch.bfloat16
    else:  # the CPU interpreter (tests): no core count, fp32 (bf16 there is not exact)
        cores, use_pdl, dtype = 0, False, torch.float32
    bench = bench or (lambda fn: _bench(triton, torch, fn))
    g = torch.Generator(device=device).manual_seed(0)
    out = {
        "what": "attention per layer, ms (median of triton.testing.do_bench), "
        f"{str(dtype).split('.')[-1]}; x{LAYERS}: one verify forward of the {LAYERS}-layer "
        "target",
        "shape": {"q_heads_per_rank": HEADS, "kv_heads": 1, "qk_dim": QK_DIM, "v_dim": V_DIM},
        "decode_splits": f"get_num_kv_splits_triton, max {mla_max_kv_splits(cores)} "
        f"(MLA cap for {cores} SMs, context {MAX_CONTEXT}); use_pdl={use_pdl}",
        "rows": [],
        "gqa_rows": [],
        "skipped_for_time": [],
    }
    todo = [(s, {}) for s in (shapes or shape_order())]
    if gqa:  # verify_splitkv's own shape (it refuses MLA), beside
        todo.append(((16, 8192, 4), {"heads": 8, "qk": 128, "v": 128}))
    for (bs, ctx, chain), dims in todo:
        if time.monotonic() - t0 > budget_s:
            out["skipped_for_time"].append([bs, ctx, chain, dims or "mla"])
            continue
        row = _one_shape(
            torch, mods, g, bs, ctx, chain, cores, use_pdl, bench, device, dtype, **dims
        )
        out["gqa_rows" if dims else "rows"].append(row)
        out["seconds"] = round(time.monotonic() - t0, 1)
        if on_row is not None:
            on_row(out)
        if device == "cuda":
            torch.cuda.empty_cache()
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _one_shape(
    torch,
    mods,
    g,
    bs,
    ctx,
    chain,
    cores,
    use_pdl,
    bench,
    device,
    dtype,
    heads=HEADS,
    qk=QK_DIM,
    v=V_DIM,
):
    x = verify_inputs(torch, bs, ctx, chain, heads, qk, v, dtype=dtype, device=device, g=g)
    row = {"bs": bs, "context": ctx, "chain": chain, "heads": heads, "qk": qk, "v": v}
    ref = torch.empty(bs * chain, heads, v, device=device, dtype=dtype)

    def timed(name, fn, out=None):  # one kernel's failure is its figure, not the run's end
        try:
            fn()
            row[f"{name}_ms"] = bench(fn)
            if out is not None:
                row[f"{name}_max_abs_diff"] = float((out.float() - ref.float()).abs().max())
        except Exception as e:
            row[f"{name}_ms"] = None
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:300]}"

    timed("extend", lambda: call_extend(mods, x, ref))
    if row["extend_ms"] is None:
        ref = None  # nothing to compare against
    for kernel in ("verify_mla", "verify_splitkv"):
        o = torch.empty(bs * chain, heads, v, device=device, dtype=dtype)
        try:
            ran = call_verify(mods, kernel, x, o)
        except Exception as e:
            row[f"{kernel}_ms"] = None
            row[f"{kernel}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        if not ran:
            row[f"{kernel}_ms"] = None
            row[f"{kernel}_refused"] = "its can_handle() refused this shape"
            continue
        timed(
            kernel, lambda k=kernel, o=o: call_verify(mods, k, x, o), o if ref is not None else None
        )
    if chain == 1:
        o = torch.empty(bs * chain, heads, v, device=device, dtype=dtype)
        try:
            state = decode_state(torch, mods, x, heads, v, cores, device)
            q = decode_view(torch, x)
            timed(
                "decode",
                lambda: call_decode(mods, x, q, o, state, use_pdl),
                o if ref is not None else None,
            )
        except Exception as e:
            row["decode_ms"] = None
            row["decode_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    for k in [k for k in row if k.endswith("_ms") and row[k] is not None]:
        row[k.replace("_ms", f"_x{LAYERS}_ms")] = row[k] * LAYERS
    best = {k: row[k] for k in ("verify_mla_ms", "verify_splitkv_ms", "decode_ms") if row.get(k)}
    if best and row.get("extend_ms"):
        k = min(best, key=best.get)
        row["best_vs_extend"] = f"{k[:-3]} {row['extend_ms'] / best[k]:.2f}x faster"
    return row


# -- prepare's command line ---------------------------------------------------------------


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="gpu_check_kernels.py",
        description="Copy SGLang's verify-attention kernels for benchmarks/gpu_check.py "
        "--kernels (run with the venv that has SGLang; the folder is not committed).",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="copy the kernel files into DIR")
    prep.add_argument("dir", type=Path)
    args = p.parse_args(argv)
    try:
        manifest = prepare(args.dir)
    except KernelsError as e:
        print(f"gpu_check_kernels: {e}", file=sys.stderr)
        return 2
    print(
        f"gpu_check_kernels: {len(manifest['files'])} files of SGLang {manifest['sglang']} "
        f"({', '.join(sorted(manifest['files']))}) in {args.dir}; stand-ins for "
        f"{', '.join(manifest['shimmed'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
