"""The memory plan of one launch, per TP rank, before any weight loads.

SGLang sizes its KV pool after the weights are in: the memory free before the model
loads (B), times mem_fraction_static, less what the weights took, is the pool
(0.5.23 KVCacheConfigurator._profile_available_bytes; 0.5.10.post1
profile_max_num_token), divided by the bytes one token's KV takes in every layer (the
"cell"). Everything else the rank allocates later (activations of a prefill chunk,
CUDA graphs, the EAGLE draft's weights, a draft pool not charged to the target's cell)
must fit in B x (1 - mem_fraction_static). A pool too small for one request stops the
server only after the weights loaded ("Not enough memory"); here it is found first.

    plan = memory_plan.build(answer, release, argv, target, draft, min_context)
    plan.lines()       the per-rank table (dry run, preflight)
    plan.findings()    a pool that cannot hold the launch's requests: the fix

Each figure says where it comes from: SGLang's own answer (the fraction it resolves,
with its VLM factor, on the described host; the models' KV geometry as its ModelConfig
reads it), the checkpoint's safetensors headers, or "estimated" (weights from the
configuration, the runtime's context, the CUDA graphs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.contract import CHAIN_VERIFY_ENV, DRAFT_CATCHUP_ENV, parse_draft_catchup
from sgl_eagle_ext.common.server_argv import ServerArgv
from sgl_eagle_ext.launcher import runtime_states
from sgl_eagle_ext.launcher.preflight import model_dirs, verify_scratch, weight_bytes, weights
from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding

GIB = 1 << 30
MIB = 1 << 20
# The context a planned launch must hold for each of its --max-running-requests
# requests (preflight --min-context overrides it).
MIN_CONTEXT = 1024
# CUDA context, cuBLAS/NCCL workspaces and communicator buffers taken before SGLang
# measures the free memory B (estimated: not measured on the target host).
RUNTIME_OVERHEAD = 1 * GIB
# SGLang's own per-batch-size allowance for one set of decode CUDA graphs (its
# mem_fraction_static heuristic: 2 MB x cuda-graph max bs), applied here to every set
# the launch captures (target verify, draft decode, draft extend, per runtime state).
GRAPH_MIB_PER_BS = 2
# SGLang's allowance for its prefill (piecewise/breakable) graphs: 1.5 GB with MLA,
# else 8 MB per captured token count (the same heuristic).
PREFILL_GRAPHS_MLA_MIB = 1536
PREFILL_GRAPH_MIB = 8
_KV_BYTES = {"auto": None, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def _kv_bytes(kv_dtype: str, model_dtype: str) -> int:
    if kv_dtype in _KV_BYTES and _KV_BYTES[kv_dtype]:
        return _KV_BYTES[kv_dtype]
    if kv_dtype.startswith(("fp8", "float8")):
        return 1
    if kv_dtype.startswith(("fp4", "float4")):
        return 1  # with scales: an upper bound
    return _model_bytes(model_dtype)


def _model_bytes(model_dtype: str) -> int:
    """Bytes of one activation element in the model's dtype (SGLang's resolved one)."""
    return 4 if model_dtype == "float32" else 2


def cell_bytes(kv: dict, kv_bytes: int) -> int:
    """Bytes one token's KV takes on one rank in all of a model's layers (SGLang's cell:
    the MLA latent, kv_lora_rank + qk_rope_head_dim, replicated on every rank; else K
    and V of the rank's KV heads)."""
    if kv.get("mla"):
        return (kv["kv_lora_rank"] + kv["qk_rope_head_dim"]) * kv["layers"] * kv_bytes
    return kv["kv_heads_per_rank"] * (kv["head_dim"] + kv["v_head_dim"]) * kv["layers"] * kv_bytes


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass
class Plan:
    host: str  # the card, as SGLang saw it
    gpu_bytes: int
    tp: int
    version: str
    mem_fraction: float
    fraction_by: str  # "pinned by --mem-fraction-static" | "SGLang's default for this host"
    vlm_factor: float | None
    target: weight_bytes.Weights
    draft: weight_bytes.Weights | None
    cell_target: int
    cell_draft_charged: int  # draft bytes per token inside the target's cell
    cell_draft_own: int  # the draft pool's real bytes per token
    activation_bytes: int  # SGLang's own reserve for a prefill chunk + TP slack
    graph_bytes: int
    graph_count: int
    graph_note: str
    max_running: int | None
    context_len: int | None
    min_context: int
    notes: list[str] = field(default_factory=list)
    scratch_bytes: int = 0  # the chain-verify kernels' scratch (verify_scratch.py)
    scratch_note: str = ""
    catchup_bytes: int = 0  # the 0-step cycles' kept hidden states (_catchup)
    catchup_note: str = ""

    @property
    def estimated(self) -> bool:
        return self.target.estimated or bool(self.draft and self.draft.estimated)

    @property
    def before_load(self) -> int:
        """B: what SGLang measures free before the weights load (estimated)."""
        return self.gpu_bytes - RUNTIME_OVERHEAD

    @property
    def static(self) -> int:
        return int(self.before_load * self.mem_fraction)

    @property
    def pool_bytes(self) -> int:
        return max(0, self.static - self.target.bytes_per_rank)

    @property
    def cell(self) -> int:
        return self.cell_target + self.cell_draft_charged

    @property
    def tokens(self) -> int:
        return self.pool_bytes // self.cell if self.cell else 0

    @property
    def draft_kv_bytes(self) -> int:
        return self.tokens * self.cell_draft_own

    @property
    def slack(self) -> int:
        return self.before_load - self.static

    @property
    def slack_needed(self) -> int:
        draft_w = self.draft.bytes_per_rank if self.draft else 0
        uncharged = max(0, self.cell_draft_own - self.cell_draft_charged) * self.tokens
        return (
            self.activation_bytes
            + self.graph_bytes
            + draft_w
            + uncharged
            + self.scratch_bytes
            + self.catchup_bytes
        )

    def fraction_for(self, tokens: int) -> float:
        """The mem_fraction_static whose pool holds `tokens` tokens."""
        need = self.target.bytes_per_rank + tokens * self.cell
        return need / self.before_load

    def per_request(self) -> int | None:
        return self.tokens // self.max_running if self.max_running else None

    def lines(self) -> list[str]:
        est = " (estimated)" if self.estimated else ""
        d = self.draft
        out = [
            f"memory plan per rank{est}: {self.host}, TP {self.tp}, SGLang {self.version}",
            f"  GPU memory {_gib(self.gpu_bytes)}; free before the weights load "
            f"~{_gib(self.before_load)} (less {_gib(RUNTIME_OVERHEAD)} CUDA/NCCL runtime, estimated)",
            f"  mem_fraction_static {self.mem_fraction:.4f} ({self.fraction_by}"
            + (f"; SGLang's VLM factor {self.vlm_factor:.4f}" if self.vlm_factor else "")
            + f"): static {_gib(self.static)}",
            f"  target weights {_gib(self.target.bytes_per_rank)} ({self.target.source})",
            f"  KV pool {_gib(self.pool_bytes)} = {self.tokens:,} tokens at "
            f"{self.cell:,} B/token (target {self.cell_target:,}"
            + (f" + draft {self.cell_draft_charged:,} charged by SGLang" if d else "")
            + ")",
        ]
        if self.max_running:
            out.append(
                f"  holds {self.max_running} running requests x {self.per_request():,} tokens "
                f"each; one request of the context length {self.context_len:,}: "
                + ("yes" if self.context_len and self.tokens >= self.context_len else "NO")
            )
        rest = [f"activations {_gib(self.activation_bytes)} (SGLang's own reserve)"]
        rest.append(f"CUDA graphs ~{_gib(self.graph_bytes)} ({self.graph_note}, estimated)")
        if d:
            rest.append(f"draft weights {_gib(d.bytes_per_rank)} ({d.source})")
            extra = max(0, self.cell_draft_own - self.cell_draft_charged) * self.tokens
            if extra:
                rest.append(
                    f"draft KV beyond SGLang's charge {_gib(extra)} "
                    f"({self.cell_draft_own:,} B/token real)"
                )
        if self.scratch_bytes:
            rest.append(
                f"verify-kernel scratch ~{_gib(self.scratch_bytes)} "
                f"({self.scratch_note}; {CHAIN_VERIFY_ENV}, estimated)"
            )
        if self.catchup_bytes:
            rest.append(
                f"0-step kept hidden states {_gib(self.catchup_bytes)} "
                f"({self.catchup_note}; {DRAFT_CATCHUP_ENV})"
            )
        out.append(
            f"  outside the pool: {_gib(self.slack)} = (1 - fraction) x free; needs ~"
            f"{_gib(self.slack_needed)}: " + ", ".join(rest)
        )
        out += [f"  {n}" for n in self.notes]
        return out

    def findings(self) -> list[Finding]:
        text = "\n        ".join(self.lines())
        found = [Finding("memory.plan", INFO, text, data=self.record())]
        ctx = self.context_len
        if self.target.bytes_per_rank >= self.static:
            found.append(
                Finding(
                    "memory.weights",
                    ERROR,
                    f"the weights alone ({_gib(self.target.bytes_per_rank)} per rank) fill "
                    f"the static memory ({_gib(self.static)}; {self._where()}): no KV pool "
                    f"is left; SGLang stops with 'Not enough memory' after the weights load.",
                    "spread the model over more GPUs (--tp-size, --pp-size), a card with "
                    "more memory, or a smaller quantization",
                    data=self.record(),
                )
            )
            return found
        if ctx and self.tokens < ctx:
            found.append(
                Finding(
                    "memory.one-request",
                    ERROR,
                    f"the KV pool holds {self.tokens:,} tokens per rank, less than one request "
                    f"of the context length {ctx:,} ({self._where()}); SGLang would start and "
                    f"refuse or truncate such a request, or stop with 'Not enough memory' "
                    f"after the weights load.",
                    f"pass -- --context-length {max(0, self.tokens) // 1024 * 1024} or less, or "
                    f"--mem-fraction-static {self.fraction_for(ctx):.3f} (if the rest fits)",
                    data=self.record(),
                )
            )
        want = (self.max_running or 0) * self.min_context
        if self.max_running and self.tokens < want:
            found.append(
                Finding(
                    "memory.running-requests",
                    WARNING,
                    f"the KV pool holds {self.tokens:,} tokens per rank: "
                    f"{self.max_running} running requests get {self.per_request():,} tokens "
                    f"each, less than the {self.min_context:,} planned ({self._where()}); "
                    f"SGLang admits fewer requests at once.",
                    f"--mem-fraction-static {self.fraction_for(want):.3f} (if the rest fits), "
                    f"fewer --max-running-requests ({max(1, self.tokens // self.min_context)}), "
                    f"a smaller --chunked-prefill-size, or fewer CUDA graphs",
                    data=self.record(),
                )
            )
        if self.slack < self.slack_needed:
            found.append(
                Finding(
                    "memory.outside-pool",
                    WARNING,
                    f"outside the KV pool {_gib(self.slack)} is left per rank, less than the "
                    f"~{_gib(self.slack_needed)} the launch allocates after the pool "
                    f"({self._where()}): an out-of-memory during CUDA-graph capture or the "
                    f"first large prefill.",
                    f"--mem-fraction-static {1 - self.slack_needed / self.before_load:.3f} or "
                    f"less, a smaller --chunked-prefill-size, or fewer CUDA graphs",
                    data=self.record(),
                )
            )
        return found

    def _where(self) -> str:
        est = "estimated; " if self.estimated else ""
        return f"{est}{self.host}, mem_fraction_static {self.mem_fraction:.3f}"

    def record(self) -> dict:
        return {
            "estimated": self.estimated,
            "host": self.host,
            "gpu_bytes": self.gpu_bytes,
            "mem_fraction_static": self.mem_fraction,
            "weights": self.target.bytes_per_rank,
            "draft_weights": self.draft.bytes_per_rank if self.draft else 0,
            "kv_pool_bytes": self.pool_bytes,
            "kv_tokens": self.tokens,
            "cell_bytes": self.cell,
            "graph_bytes": self.graph_bytes,
            "slack": self.slack,
            "slack_needed": self.slack_needed,
        }


def target_weights(model_dir, config: dict, tp: int, draft: bool = False):
    """From the safetensors headers when the weights are there, else estimated."""
    sizes, _ = weights.byte_sizes(Path(model_dir)) if model_dir else ({}, None)
    if sizes:
        return weight_bytes.from_headers(sizes, tp)
    return (weight_bytes.estimate_draft if draft else weight_bytes.estimate)(config, tp)


def _states(fields: dict, release, argv: ServerArgv, sizes):
    """The runtime states a speculative launch builds (runtime_states.count), or None."""
    steps = fields.get("speculative_num_steps")
    if not fields.get("speculative_algorithm") or steps is None:
        return None
    buckets = None
    if argv.has("speculative-adaptive"):
        from sgl_eagle_ext.common import adaptive_config

        path = argv.value(adaptive_config.FLAG)
        if path:
            buckets, _ = adaptive_config.load(path, release)
    return runtime_states.count(int(steps), buckets, [int(b) for b in sizes])


def _graph_sizes(fields: dict) -> list:
    """The decode CUDA-graph batch sizes this launch captures ([]: graphs off)."""
    sizes = fields.get("cuda_graph_config.decode.bs") or fields.get("cuda_graph_bs") or []
    off = fields.get("disable_cuda_graph") or fields.get("cuda_graph_config.decode.backend") in (
        "disabled",
    )
    return [] if off else list(sizes)


def _graphs(fields: dict, sizes: list, gp, mla: bool) -> tuple[int, int, str]:
    """(bytes, graphs, what) for the CUDA graphs this launch captures; `gp`: its runtime
    states over `sizes` (_states), None without speculation."""
    if not sizes:
        return 0, 0, "CUDA graphs off"
    if gp is not None:
        sets = [
            max(s.batch_sizes, default=0) * n
            for s in gp.states
            for n in (1, 1, 1 if s.steps > 1 else 0)
        ]
        count = sum(gp.total(kind) for kind in ("verify", "draft_extend", "draft_decode"))
        what = f"{count} graphs in {len(gp.states)} runtime state(s)"
    else:
        sets, count, what = [max(sizes)], len(sizes), f"{len(sizes)} decode graphs"
    decode = GRAPH_MIB_PER_BS * sum(sets) * MIB
    if "cuda_graph_config.prefill.backend" in fields:  # 0.5.19+: one config per phase
        prefill_bs = fields.get("cuda_graph_config.prefill.bs") or []
        prefill_on = fields["cuda_graph_config.prefill.backend"] != "disabled"
    else:  # earlier: piecewise graphs
        prefill_bs = fields.get("piecewise_cuda_graph_tokens") or []
        prefill_on = not fields.get("disable_piecewise_cuda_graph", True)
    prefill = 0
    if prefill_on:
        prefill = PREFILL_GRAPHS_MLA_MIB * MIB if mla else PREFILL_GRAPH_MIB * len(prefill_bs) * MIB
        what += " + prefill graphs"
    return decode + prefill, count, what


def _scratch(env, fields, gp, mem, tp, tcfg, dcfg) -> tuple[int, str]:
    """The chain-verify kernels' scratch per rank (verify_scratch.py), for the chain
    lengths of the runtime states `gp` (_states)."""
    if gp is None:
        return 0, ""
    chains = [s.steps + 1 for s in gp.states]

    def heads(cfg: dict, kv: dict | None) -> dict | None:
        if not kv:
            return None
        text, _ = model_dirs.text_config(cfg)
        q = max(1, int(text["num_attention_heads"]) // tp)
        if kv.get("mla"):
            return {"heads": q, "kv_heads": 1, "v_dim": kv["kv_lora_rank"], "mla": True}
        return {"heads": q, "kv_heads": kv["kv_heads_per_rank"], "v_dim": kv["v_head_dim"],
                "mla": False}  # fmt: skip

    draft = heads(dcfg, mem.get("draft")) if dcfg is not None else None
    return verify_scratch.estimate(
        env,
        fields.get("speculative_eagle_topk"),
        chains,
        fields.get("max_running_requests"),
        heads(tcfg, mem["target"]),
        draft,
    )


def _catchup(env, fields, release, gp, tcfg, dcfg, model_bytes: int) -> tuple[int, str]:
    """The hidden states in_sglang/draft_catchup.py keeps while at 0 steps, per rank at
    most: kept positions x running requests x the EAGLE-3 aux layers x the target's
    hidden size (every rank holds them whole). Nothing where the catch-up stays off:
    the overlap scheduler, a tree, no 0-step state, a release without the skip."""
    try:
        keep = parse_draft_catchup(str((env or {}).get(DRAFT_CATCHUP_ENV, "")))
    except ValueError:
        return 0, ""
    if (
        keep is None
        or release.draft_catchup is None
        or not fields.get("disable_overlap_schedule")
        or fields.get("speculative_eagle_topk") != 1
        or gp is None
        or not any(s.steps == 0 for s in gp.states)
    ):
        return 0, ""
    running = fields.get("max_running_requests")
    text, _ = model_dirs.text_config(tcfg)
    hidden = int(text.get("hidden_size") or 0)
    eagle = (dcfg or {}).get("eagle_config") or {}
    aux = len(eagle.get("eagle_aux_hidden_state_layer_ids") or ()) or 3
    if not running or not hidden:
        return 0, ""
    n = keep * int(running) * aux * hidden * model_bytes
    return n, f"{keep} positions x {running} requests x {aux} x {hidden} x {model_bytes} B"


def _activations(fields: dict, gpu_mib: float) -> int:
    """SGLang's own reserve for activations (its mem_fraction_static heuristic, without
    the graph term): 512 MB + 1.5 MB per token of a prefill chunk + 1 GB x tp x pp / 8."""
    chunk = fields.get("chunked_prefill_size") or 0
    tokens = max(chunk if chunk > 0 else fields.get("max_prefill_tokens") or 0, 2048)
    tp, pp = fields.get("tp_size") or 1, fields.get("pp_size") or 1
    mib = 512 + tokens * 1.5 + tp * pp / 8 * 1024
    return int(mib * MIB)


def build(
    answer,
    release: releases.Release,
    argv,
    target_dir,
    target_config: dict,
    draft_dir=None,
    draft_config: dict | None = None,
    min_context: int = MIN_CONTEXT,
    env=None,
) -> tuple[Plan | None, str]:
    """(the plan, '') from SGLang's answer about the launch, or (None, why none);
    `env`: the launch's environment (the chain-verify and draft catch-up switches)."""
    argv = ServerArgv.of(argv)
    mem = (answer.memory if answer is not None else None) or {}
    res = answer.settings if answer is not None else None
    if not mem or "target" not in mem:
        return None, mem.get("error") or "SGLang did not read the models' KV geometry"
    if res is None or res.error:
        return None, "SGLang did not resolve the launch's settings"
    fields = res.fields
    gpu_mib = mem.get("gpu_mib")
    if not gpu_mib or fields.get("device") != "cuda":
        return None, "not a GPU launch (SGLang reads no device memory)"
    tp = int(fields.get("tp_size") or 1)
    fraction = fields.get("mem_fraction_static")
    if fraction is None:
        return None, "SGLang resolved no mem_fraction_static"
    pinned = argv.value("mem-fraction-static") is not None
    kvb = _kv_bytes(str(mem.get("kv_cache_dtype") or "auto"), mem["target"].get("dtype", ""))
    cell_t = cell_bytes(mem["target"], kvb)
    draft_kv = mem.get("draft")
    charged = own = 0
    dw = None
    if draft_kv and draft_config is not None:
        own = cell_bytes(draft_kv, _kv_bytes(str(mem.get("kv_cache_dtype") or "auto"), ""))
        if release.draft_kv_in_pool:
            charged = int(cell_t * draft_kv["layers"] / mem["target"]["layers"])
        dw = target_weights(draft_dir, draft_config, tp, draft=True)
    sizes = _graph_sizes(fields)
    gp = _states(fields, release, argv, sizes or [1])  # the adaptive table read once
    graphs, count, what = _graphs(fields, sizes, gp, bool(mem["target"].get("mla")))
    ctx = (answer.context.get("target") or {}).get("len") or fields.get("context_length")
    host = answer.host
    name = (
        f"{host['name']} ({host['memory_mib']} MiB, as described)"
        if host
        else f"this machine's GPU ({gpu_mib:.0f} MiB)"
    )
    plan = Plan(
        host=name,
        gpu_bytes=int(gpu_mib * MIB),
        tp=tp,
        version=answer.version,
        mem_fraction=float(fraction),
        fraction_by="pinned by --mem-fraction-static"
        if pinned
        else f"SGLang {answer.version}'s default for this card",
        vlm_factor=mem.get("vlm_factor") if not pinned else None,
        target=target_weights(target_dir, target_config, tp),
        draft=dw,
        cell_target=cell_t,
        cell_draft_charged=charged,
        cell_draft_own=own,
        activation_bytes=_activations(fields, gpu_mib),
        graph_bytes=graphs,
        graph_count=count,
        graph_note=what,
        max_running=fields.get("max_running_requests"),
        context_len=int(ctx) if ctx else None,
        min_context=min_context,
    )
    plan.scratch_bytes, plan.scratch_note = _scratch(
        env, fields, gp, mem, tp, target_config, draft_config
    )
    plan.catchup_bytes, plan.catchup_note = _catchup(
        env, fields, release, gp, target_config, draft_config,
        _model_bytes(mem["target"].get("dtype", "")),
    )  # fmt: skip
    if pinned and mem.get("vlm_factor"):
        plan.notes.append(
            f"a vision-language model: SGLang's default would keep {1 - mem['vlm_factor']:.1%} "
            "of the static memory for the image encoder; a pinned fraction keeps none, so "
            "this plan is for text requests"
        )
    return plan, ""


def _config(path) -> dict | None:
    import json

    try:
        cfg = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return None
    return cfg if isinstance(cfg, dict) else None


def for_launch(
    answer, release, argv, min_context: int = MIN_CONTEXT, env=None
) -> tuple[Plan | None, str]:
    """build() for a launch's final argument list (its model directories' config.json)
    and environment."""
    argv = ServerArgv.of(argv)
    target = argv.model_path
    tcfg = _config(target) if target else None
    if tcfg is None:
        return None, f"no readable config.json in --model-path {target}"
    draft = argv.draft_model_path
    dcfg = _config(draft) if draft else None
    try:
        return build(answer, release, argv, target, tcfg, draft, dcfg, min_context, env)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:  # a config it cannot read
        return None, f"the configuration lacks what the plan reads ({type(e).__name__}: {e})"


def lines(
    answer, release, argv, why: str = "", min_context: int = MIN_CONTEXT, env=None
) -> list[str]:
    """The dry run's '#' lines for the memory plan."""
    plan, reason = (
        (None, why) if answer is None else for_launch(answer, release, argv, min_context, env)
    )
    if plan is None:
        return [f"# memory plan: none ({reason})"]
    out = [f"# {x}" for x in plan.lines()]
    for f in plan.findings()[1:]:
        out.append(f"# {f.severity}: {f.message}")
        if f.fix:
            out.append(f"#   fix: {f.fix}")
    return out
