"""python -m sgl_eagle_ext.tune live: one weight load, every (concurrency, steps) measured.

    python -m sgl_eagle_ext.tune live --model-path M --draft-model-path D \
        [--preset-file F] [--levels 1,2,4,8,16,32,64] [--max-steps 5] [--budget-minutes N] \
        [--results tune-live/results.jsonl] [--baseline-arm] [--also-trees] [-- SGLANG ARGS]

Starts ONE server through the launcher (preflight, NCCL checks, READY) with SGLang's
adaptive speculation on (chain, candidate steps 0..max in every bucket, so a runtime
state and CUDA graphs exist for each; CUDA graphs only up to the largest level) and
EAGLE3_PROFILE=1. The schedule controller inside every scheduler rank
(in_sglang/schedule_control.py) holds the step count written to the schedule file.
Per level c: one warm-up (c short requests), then rounds of c concurrent requests of
--max-tokens (closed loop, the bench client) round-robin over the step counts (pin s
while idle, one round, next s), until each cell's profile windows at (batch size c,
steps s) hold --request-cycles verified request-cycles (at least MIN_CYCLES cycles, at
most --max-rounds rounds). Round-robin: a level's cells share the host's conditions.
The switch happens at the first verify after a pin; those cycles run at the previous
steps and land in another window key, so they are not counted. Why that many: a
cycle's time is steady, its accept length is not: the per-request count of accepted
tokens has a spread near 1 token for 3-5 step chains, so the standard error of the
mean accept length is about 1/sqrt(n) over n request-cycles: 300 give ~0.06 tokens
(2% of an accept length of 3), below the 3% gain the tuner calls noise.
Steps-0 cells are the in-server baseline. Then: the table, a verdict per level, the
crossover, the adaptive config (per level, from the measured cells by tune's rules;
checked by SGLang's own loader in the server's python), the fastest fixed preset, the
HTML report, and a validation pass: the written table under SGLang's own controller
at every level (the controller swaps it in at run time: SGLang reads its config only
at startup), its rounds alternating with rounds pinned at the level's best cell.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from sgl_eagle_ext.common import (
    adaptive_config,
    chain,
    interrupts,
    paths,
    ports,
    redaction,
    releases,
)
from sgl_eagle_ext.common.contract import SCHEDULE_FILE_ENV
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.common.schedule_file import write_request
from sgl_eagle_ext.launcher import fairness, presets, running
from sgl_eagle_ext.launcher import plan as launch_plan
from sgl_eagle_ext.launcher.preflight import ask_sglang
from sgl_eagle_ext.profiling import names as profile_names
from sgl_eagle_ext.tools.bench import arms, probe, prompts
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.tune import live_report
from sgl_eagle_ext.tools.tune.live_driver import Driver, ProfileTail, Tally
from sgl_eagle_ext.tools.tune.live_options import LiveOptions
from sgl_eagle_ext.tools.tune.live_results import Key, Results, fit, schedule

PROG = "sgl_eagle_ext.tune live"  # (the earlier spelling `tune --live` works too)
TREE_PRESETS = ("eagle3-2step",)
EXIT_INTERRUPTED = 130


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 0 or values[-1] > 100_000:
        raise UserError(
            f"{flag} {text[:60]!r}: not a list of whole numbers (at most 100000).",
            fix=f"e.g. {flag} 1,2,4",
        )
    return values


# -- the live server -------------------------------------------------------------------


def live_preset(
    preset_file: Path | None, out_dir: Path, levels: list[int], steps: list[int]
) -> Path:
    """The preset file of the live server: the user's (or eagle3-adaptive) plus adaptive
    on every step count at every level bucket, profiling and the schedule file."""
    table = adaptive_config.write(
        out_dir / "live-table.json",
        {lv: steps for lv in levels},
        "tune --live: every candidate step in every bucket (the schedule controller pins "
        "one at a time)",
    )
    base = str(preset_file.resolve()) if preset_file else "eagle3-adaptive"
    top = max(steps)
    return presets.write(
        out_dir / "live-preset.toml",
        inside=out_dir,
        flag="--results (its folder)",
        comment=f"written by {PROG}",
        extends=base,
        server={
            "speculative-algorithm": "EAGLE3",
            "speculative-eagle-topk": 1,
            "speculative-num-steps": top,
            "speculative-num-draft-tokens": chain.draft_tokens(top),
            "speculative-adaptive": True,
            "speculative-adaptive-config": str(table.resolve()),
        },
        # the batch limits every server of this run shares come as arguments (server_pins)
        env={
            profile_names.ENV: "1",
            profile_names.ENV_FILE: str((out_dir / "profile-{rank}.jsonl").resolve()),
            SCHEDULE_FILE_ENV: str(schedule_file(out_dir).resolve()),
        },
    )


def arm_preset(preset_file: Path | None, out_dir: Path, name: str) -> str:
    """A separate fixed server: baseline (no speculation) or a tree preset."""
    if name != "baseline" or not preset_file:
        return name
    off = [
        "speculative-algorithm",
        "speculative-eagle-topk",
        "speculative-num-steps",
        "speculative-num-draft-tokens",
        "speculative-adaptive",
        "speculative-adaptive-config",
    ]
    path = presets.write(
        out_dir / "baseline-preset.toml",
        inside=out_dir,
        flag="--results (its folder)",
        extends=str(preset_file.resolve()),
        server=dict.fromkeys(off, False),
    )
    return str(path)


def schedule_file(out_dir: Path) -> Path:
    return out_dir / "schedule.json"


class Schedule:
    """The file every rank's schedule controller reads; written only while idle."""

    def __init__(self, path: Path):
        self.path = path
        self.seq = int(time.time() * 1000)  # rises across runs sharing the file

    def write(self, **fields) -> None:
        self.seq += 1  # TP rank 0 grants it to every rank at one verify (schedule_file.py)
        paths.check_writable_file("schedule", self.path)  # never through a planted link
        write_request(self.path, self.seq, **fields)


def plan_server(preset: str, opts: LiveOptions, log_file: Path, extra: list[str]) -> arms.ArmPlan:
    """The one place that builds a launch of this run (bench's arm code, as it is)."""
    return arms.plan_arm(
        "tune",
        preset,
        server=opts,
        port=ports.pick(),
        log_file=log_file,
        extra=extra,
    )


def server_pins(levels: list[int], release, cpu: bool, extra: list[str]) -> list[str]:
    """SGLang arguments every server of the run gets (after the user's own, which win):
    a request pool and decode CUDA graphs up to the largest level, the same for every
    server, so each level can be batched whole and no server is capped otherwise (unset,
    SGLang caps an EAGLE server at 48 requests; the presets pin 128)."""
    top = max(levels)
    given = {launch_plan.canonical_flag(t, release) for t in extra}
    pins = []
    if "max-running-requests" not in given:
        pins += ["--max-running-requests", str(top)]
    if not cpu and not given & {"cuda-graph-bs", "cuda-graph-max-bs"}:
        # graphs for every candidate step count, but only up to the largest level
        sizes = fairness.decode_graph_sizes(top, speculative=True)
        pins += [f"--{release.flag('cuda-graph-max-bs')}", str(top)]
        pins += [f"--{release.flag('cuda-graph-bs')}", *map(str, sizes)]
    return [*extra, *pins]


def _graph_limit(fields: dict) -> int | None:
    """The largest decode batch the resolved settings capture as a CUDA graph (None: no
    decode graphs, or not known)."""
    if fields.get("cuda_graph_config.decode.backend") == "disabled" or fields.get(
        "disable_cuda_graph"
    ):
        return None
    for key in ("cuda_graph_config.decode.bs", "cuda_graph_bs"):
        sizes = fields.get(key)
        if isinstance(sizes, list) and sizes:
            return max(int(x) for x in sizes)
    for key in ("cuda_graph_config.decode.max_bs", "cuda_graph_max_bs"):
        if isinstance(fields.get(key), int):
            return fields[key]
    return None


def unreachable(levels: list[int], resolved) -> str | None:
    """Why the largest level cannot be batched whole under these resolved settings, or
    None. A level above max_running_requests never forms a batch of that size: its
    rounds would count 0 cycles at that batch size; one above the graph limit would run
    without CUDA graphs, unlike the levels below it."""
    top = max(levels)
    f = resolved.fields
    cap = f.get("max_running_requests")
    if isinstance(cap, int) and cap < top:
        bad = [lv for lv in levels if lv > cap]
        return (
            f"--levels {','.join(map(str, bad))}: max_running_requests resolves to {cap} "
            f"({resolved.label}), so no batch of {bad[0]} ever runs"
        )
    graphs = _graph_limit(f)
    if graphs is not None and graphs < top:
        bad = [lv for lv in levels if lv > graphs]
        return (
            f"--levels {','.join(map(str, bad))}: decode CUDA graphs resolve up to batch "
            f"{graphs} ({resolved.label}), so those levels would run without graphs"
        )
    return None


# The tuned server's own variables beside a --baseline-arm server: its profile windows
# measure its cells (the recorder's cost: docs/profiling.md), the plain server is
# measured by the load generator alone.
PROFILED_ONLY = dict.fromkeys(
    (profile_names.ENV, profile_names.ENV_FILE),
    "the tuned server's profile windows measure its cells; the baseline server has none",
)


def check_servers(
    plans: dict[str, arms.ArmPlan], levels: list[int], *, allow_unequal: bool = False
) -> dict:
    """Before any server starts: every level can be batched whole on every server, and
    the servers differ only in speculation (--allow-unequal: recorded). Returns the
    settings record."""
    launches = {name: p.launch for name, p in plans.items()}
    notes: list[str] = []
    resolved = fairness.resolve_arms(launches, notes=notes)
    for name, r in resolved.items():
        why = unreachable(levels, r)
        if why:
            raise UserError(
                f"{why} (the {name} server).",
                fix=f"drop those levels, or pass -- --max-running-requests {max(levels)} "
                f"--cuda-graph-max-bs {max(levels)} (or leave both to {PROG}, which sets them)",
            )
    release = next(iter(launches.values())).release
    envs = {name: launch.env for name, launch in launches.items()}
    verdict = fairness.judge(resolved, release, allow_unequal, envs, PROFILED_ONLY)
    verdict.notes = notes
    for line in verdict.lines():
        _say(line)
    return verdict.record()


def connect(proc: arms.LauncherProcess) -> probe.Server:
    """The started server, trusted as its launcher trusts it (its own --ssl-certfile)."""
    return probe.Server(proc.url, api_key=proc.api_key, tls=proc.tls).connect()


def start_server(plan: arms.ArmPlan, startup_timeout: float | None) -> arms.LauncherProcess:
    """Start a planned launch and wait for READY."""
    proc = arms.LauncherProcess(plan)
    try:
        proc.wait_ready(startup_timeout)
    except arms.ArmFailed as e:
        raise UserError(str(e), code=1) from None
    except BaseException:  # Ctrl-C while it loads: stop it, then stop
        proc.stop()
        raise
    return proc


# -- the adaptive config ---------------------------------------------------------------


_LOADED: dict[tuple, dict] = {}  # (buckets, initial, python) -> SGLang's answer


def sglang_loads(path: Path, initial: int, python: str = sys.executable) -> dict:
    """The buckets SGLang's own loader builds from `path`, in the server's python, asked
    through the preflight's probe (ask_sglang.adaptive_buckets) once per distinct table:
    the run writes the same table after its cells and again for its report."""
    key = (path.read_text(encoding="utf-8").split("\n", 2)[-1], initial, python)
    if key not in _LOADED:
        _LOADED[key] = _sglang_loads(path, initial, python)
    return _LOADED[key]


def _sglang_loads(path: Path, initial: int, python: str) -> dict:
    buckets, why = ask_sglang.adaptive_buckets(python, path.resolve(), initial, timeout=300)
    if buckets is None:
        raise UserError(f"{path}: SGLang's loader refused the written table: {why}", code=1)
    return buckets


def write_config(
    cells, opts: LiveOptions, out_dir: Path, release
) -> tuple[Path | None, int, dict, list]:
    min_step = release.adaptive.min_step if release.adaptive else 0
    table, picks = live_report.adaptive_table(cells, min_step)
    if not table:
        return None, 0, {}, []
    union = sorted({s for v in table.values() for s in v})
    initial = union[len(union) // 2]
    about = (
        f"written by python -m {PROG} on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from "
        f"{len(cells)} cells measured on one server ({opts.model_path} + "
        f"{opts.draft_model_path}); baseline: each level's steps-0 cell; launch with "
        f"--speculative-num-steps {initial}"
    )
    path = adaptive_config.write(out_dir / "adaptive.json", table, about)
    ours, found = adaptive_config.load(path, release)  # SGLang's rules, then SGLang itself
    if ours is None:
        raise UserError(f"{path}: {found[0].message}", code=1)
    theirs = sglang_loads(path, initial)
    why = [f"  c={bs}: {p.steps} ({p.why})" for bs, p in picks.items()]
    return path, initial, theirs, why


def table_digest(path: Path, release) -> str:
    """Of the buckets (not the file: its _about line carries the time it was written)."""
    buckets, found = adaptive_config.load(path, release)
    if buckets is None:
        raise UserError(f"{path}: {found[0].message}", code=1)
    return hashlib.sha256(json.dumps(buckets, sort_keys=True).encode()).hexdigest()[:12]


# -- the run ---------------------------------------------------------------------------


class Progress:
    """A tqdm bar over the measurements (ETA) on a terminal; a plain line per cell off one."""

    def __init__(self, total: int):
        self.tty = sys.stderr.isatty()
        self.bar = tqdm(total=total, unit="cell", file=sys.stderr, disable=not self.tty)
        self.t0 = time.monotonic()
        self.total, self.n = total, 0

    def retotal(self, total: int) -> None:
        self.total = self.bar.total = total
        self.bar.refresh()

    def done(self, key: Key, rec: dict) -> None:
        self.n += 1
        self.bar.update(1)
        p, c = rec["profile"], rec["client"]
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.n * (self.total - self.n)
        line = (
            f"[{self.n}/{self.total}] {key.tag()}: "
            f"{c['output_tok_s'] or 0:.2f} tok/s, accept "
            f"{'-' if p['accept_len'] is None else format(p['accept_len'], '.2f')}, cycle "
            f"{'-' if p['cycle_ms'] is None else format(p['cycle_ms'], '.0f')} ms, "
            f"{p['cycles']} cycles, {rec['rounds']} round(s), {rec['wall_s']:.0f} s; "
            f"ETA {eta / 60:.1f} min"
        )
        (tqdm.write if self.tty else print)(line, **({} if self.tty else {"flush": True}))

    def close(self) -> None:
        self.bar.close()


def _say(msg: str) -> None:
    print(msg, flush=True)


async def _level(driver, sched: Schedule, level: int, keys: list[Key]) -> list[dict]:
    """One level's cells, their rounds round-robin over the step counts (pin, round,
    next pin ...): every cell of a level spans the same stretch of time, so a host
    whose speed drifts (other work, thermals) shifts them alike. The switch happens at
    the first verify after a pin; its cycles run at the previous steps and land in
    another (batch size, steps) window, so they are not counted."""
    async with driver.session():
        t0 = time.monotonic()
        sched.write(pin=keys[0].steps)
        await driver.warm_up(level)
        tallies = {k: Tally(level, k.steps) for k in keys}
        rounds = 0
        while rounds < driver.opts.max_rounds:
            for k, t in tallies.items():
                if rounds and t.enough(driver.opts.request_cycles):
                    continue
                sched.write(pin=k.steps)  # idle here: every rank sees it at the same batch
                await driver.into(t)
            rounds += 1
            if all(t.enough(driver.opts.request_cycles) for t in tallies.values()):
                break
        wall = (time.monotonic() - t0) / len(keys)  # per cell, the level's wall time shared
        return [t.record(wall, driver.opts.max_tokens) for t in tallies.values()]


async def _cells(driver, sched: Schedule, results: Results, todo: list[Key], ctx) -> None:
    per = [r["wall_s"] for r in results.of_kind("cell") if r.get("wall_s")]
    while todo:
        level = min(k.level for k in todo)
        keys = [k for k in todo if k.level == level]
        for key, rec in zip(keys, await _level(driver, sched, level, keys), strict=True):
            results.append({"kind": "cell", **rec, **_settings(ctx)})
            per.append(rec["wall_s"])
            ctx["progress"].done(key, rec)
        todo[:] = [k for k in todo if k.level != level]
        budget = ctx["budget_s"]
        if budget and todo:
            left = budget - (time.monotonic() - ctx["t0"])
            mean = sum(per) / len(per)
            keep = fit(todo, mean, left, reserve=ctx["reserve"])
            if len(keep) < len(todo):
                dropped = todo[len(keep) :]
                ctx["dropped"] += dropped
                _say(
                    f"budget: {left / 60:.1f} min left at ~{mean:.0f} s a cell (the last "
                    f"measured; larger levels take longer) with the validation pass kept: "
                    f"dropped {', '.join(k.tag() for k in dropped)}"
                )
                todo[:] = keep
                ctx["progress"].retotal(ctx["progress"].n + len(keep) + ctx["reserve"])


async def _validate(driver, sched, results, table: Path, initial: int, levels, ctx, release):
    """Each level under SGLang's own controller on the written table, its rounds
    alternating with rounds pinned at the level's best measured cell (the reference
    beside it, measured under the same host conditions)."""
    digest = table_digest(table, release)
    todo = [lv for lv in levels if not results.has(Key("validation", lv, table=digest))]
    cells = live_report.grid(results.of_kind("cell"))

    def adaptive():
        sched.write(table=str(table.resolve()), initial_steps=initial)

    for lv in todo:
        row = cells.get(lv, {})
        best = live_report.best(row)
        adaptive()  # SGLang's controller; its slots persist across the pinned rounds
        ref = None if best is None else (best, lambda s=best: sched.write(pin=s))
        # The warm-up lets SGLang's controller settle as it would in service: it decides
        # after 10 batches, then every 5 (its defaults); 24 batches give it two decisions.
        accept = (row[best].get("profile") or {}).get("accept_len") if best is not None else 1
        tokens = max(driver.opts.warmup_tokens, driver.opts.max_tokens, int(24 * (accept or 1)))
        rec = await driver.measure(
            lv,
            rounds_at_least=driver.opts.validation_rounds,
            reference=ref,
            setup=adaptive,
            warmup_tokens=tokens,
        )
        results.append({"kind": "validation", "table": digest, **rec, **_settings(ctx)})
        ctx["progress"].done(Key("validation", lv, table=digest), rec)
    sched.write()  # back to the launch table


def _settings(ctx: dict) -> dict:
    """Beside every figure: whether the run's servers differed only in speculation, and
    (--allow-unequal) what else differed."""
    rec = ctx.get("settings")
    return {"arms_equal": rec["fair"], "arm_settings": rec} if rec else {}


def _arm_keys(opts: LiveOptions, levels) -> list[Key]:
    names = (["baseline"] if opts.baseline_arm else []) + (
        list(TREE_PRESETS) if opts.also_trees else []
    )
    return [Key("arm", lv, arm=n) for n in names for lv in levels]


def report(
    opts: LiveOptions, results: Results, out_dir: Path, steps, release, ctx
) -> tuple[list, Path | None]:
    cells = results.of_kind("cell")
    sections: list[tuple[str, list[str]]] = []
    sections.append(("cells", live_report.table_lines(cells, steps)))
    plain = [a for a in results.of_kind("arm") if a.get("arm") == "baseline"]
    v = live_report.verdicts(cells, plain)
    sections.append(
        (
            "verdict",
            [live_report.verdict_basis(cells, plain)]
            + [s for _, s in v.values()]
            + [live_report.crossover_line(v)],
        )
    )
    path, initial, theirs, why = write_config(cells, opts, out_dir, release)
    if path:
        cfg = [
            f"wrote {path} (SGLang's loader builds buckets {json.dumps(theirs)})",
            *why,
            f"launch: python -m sgl_eagle_ext.launch --preset eagle3-adaptive "
            f"--adaptive-config {path} -- --speculative-num-steps {initial}",
        ]
    else:
        cfg = ["no adaptive table: no level has both a steps-0 and a drafting cell"]
    sections.append(("adaptive config", cfg))
    sentence, fixed = live_report.recommended_fixed(cells, str(opts.preset_file or "") or None)
    rec_lines = [sentence]
    if fixed:
        fixed_path = out_dir / "recommended-fixed.toml"
        paths.write_text("--results (its folder)", fixed_path, fixed, inside=out_dir)
        rec_lines.append(
            f"wrote {fixed_path}: python -m sgl_eagle_ext.launch --preset-file {fixed_path} ..."
        )
    sections.append(("fixed preset", rec_lines))
    if path:
        vals = [
            r
            for r in results.of_kind("validation")
            if r.get("table") == table_digest(path, release)
        ]
        if vals:
            sections.append(("validation", live_report.validation_lines(cells, vals)))
    arm_lines = live_report.arm_lines(cells, results.of_kind("arm"))
    if arm_lines:
        if opts.baseline_arm:
            arm_lines.append(
                "  (a 0-step cycle is a one-token verify, plus the draft's one-token "
                "draft-extend under the overlap scheduler; on the CPU harness, where the "
                "draft catches up instead, 0.96-0.98x a plain decode, docs/results.md; on a "
                "GPU unmeasured: read the ratio, do not assume 1.0)"
            )
        sections.append(("separate servers", arm_lines))
    if ctx["dropped"]:
        sections.append(
            (
                "budget",
                [f"dropped to fit --budget-minutes: {', '.join(k.tag() for k in ctx['dropped'])}"],
            )
        )
    html = out_dir / "report.html"
    page = live_report.html(f"tune --live: {opts.model_path}", sections)
    paths.write_text("--results (its folder)", html, page, inside=out_dir)
    for head, lines in sections:
        _say(f"\n== {head}")
        _say("\n".join(lines))
    _say(f"\nresults: {opts.results}; report: {html}")
    return sections, path


def run(opts: LiveOptions, extra: list[str]) -> int:
    """One tune live run (tools/tune/cli.py maps the command line onto `opts`); `extra`:
    the SGLang arguments every server of the run gets."""
    # the results file (and the folder of the run's files) refused before any work
    paths.check_writable_file("--results", opts.results)
    try:  # its folder's paths go into the run's preset, environment and SGLang's config
        str(opts.results.resolve()).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"--results {opts.results}: its folder's full path is not UTF-8; the run's "
            "files are named to SGLang in its preset and environment, which need UTF-8.",
            fix="give --results a path whose folder names are UTF-8",
        ) from None
    levels = _ints(opts.levels, "--levels")
    if levels[0] < 1:
        raise UserError("--levels: concurrencies start at 1.", fix="e.g. --levels 1,2,4")
    if not 1 <= opts.max_steps <= 16:
        raise UserError(f"--max-steps {opts.max_steps}: must be 1..16.")
    steps = _ints(opts.steps, "--steps") if opts.steps else list(range(opts.max_steps + 1))
    if 0 not in steps or max(steps) > opts.max_steps:
        raise UserError(
            f"--steps {opts.steps}: must hold 0 (the in-server baseline) and stay within "
            f"--max-steps {opts.max_steps}.",
            fix="e.g. --steps 0,1,2,3,5",
        )
    for flag, v in (
        ("--max-tokens", opts.max_tokens),
        ("--max-rounds", opts.max_rounds),
        ("--validation-rounds", opts.validation_rounds),
        ("--request-cycles", opts.request_cycles),
    ):
        if v < 1:
            raise UserError(f"{flag} {v}: must be at least 1.")
    release, _ = releases.resolve(opts.sglang_version, force=opts.force)
    if release.adaptive is None or release.adaptive.control_anchor is None:
        raise UserError(
            f"SGLang {release.version}: the schedule controller has no anchor in this "
            "release (tune --live needs run-time step switching with 0 steps).",
            fix="use SGLang 0.5.23, or tune offline from profiled logs (python -m "
            "sgl_eagle_ext.tune logs LOG...)",
        )
    prompt_set = prompts.load(opts.prompts)
    for flag, path in (
        ("--model-path", opts.model_path),
        ("--draft-model-path", opts.draft_model_path),
    ):
        running.check_model_dir(flag, path)  # before any file of the run is written
    out_dir = opts.results.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    setup = {
        "model_path": opts.model_path,
        "draft_model_path": opts.draft_model_path,
        "preset_file": str(opts.preset_file) if opts.preset_file else None,
        "max_tokens": opts.max_tokens,
        "prompts": prompt_set.sha256,
        "cpu": opts.cpu,
        **({"overlays": list(opts.overlays)} if opts.overlays else {}),  # older runs: none
        # secrets hidden as every record hides them: the resume compares this as written
        "extra": redaction.redact_args(extra),
    }
    results = Results(opts.results, setup).load()
    if results.resumed:
        _say(f"{PROG}: resuming {opts.results}: {results.resumed} measurement(s) kept, not rerun")
    todo = [k for k in schedule(levels, steps) if not results.has(k)]
    arm_todo = [k for k in _arm_keys(opts, levels) if not results.has(k)]
    ctx = {
        "t0": time.monotonic(),
        "budget_s": opts.budget_minutes * 60 if opts.budget_minutes else None,
        "reserve": len(levels) + len(arm_todo),
        "dropped": [],
    }
    progress = Progress(len(todo) + len(levels) + len(arm_todo))
    ctx["progress"] = progress
    stop = {"proc": None}

    # SIGTERM/SIGHUP as Ctrl-C (interrupts.run's loop cancels its task: no shutdown
    # traceback), and Ctrl-C given back when started with it ignored (`tune --live ... &`)
    signals = contextlib.ExitStack()
    signals.enter_context(interrupts.sigterm_as_sigint())
    extra = server_pins(levels, release, opts.cpu, extra)
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    plans = {
        "live": plan_server(
            str(live_preset(opts.preset_file, out_dir, levels, steps)),
            opts,
            out_dir / f"live-{stamp}.log",
            extra,
        )
    }
    for name in dict.fromkeys(k.arm for k in _arm_keys(opts, levels)):
        plans[name] = plan_server(
            arm_preset(opts.preset_file, out_dir, name),
            opts,
            out_dir / f"{Path(name).stem}-{stamp}.log",
            extra,
        )
    ctx["settings"] = check_servers(
        plans, levels, allow_unequal=opts.allow_unequal
    )  # before any weights load
    try:
        need_live = bool(todo)
        if not need_live:  # every cell kept: is the validation pass of its table done?
            path, _, _, _ = write_config(results.of_kind("cell"), opts, out_dir, release)
            digest = table_digest(path, release) if path else None
            need_live = bool(path) and any(
                not results.has(Key("validation", lv, table=digest)) for lv in levels
            )
        if need_live:
            sched = Schedule(schedule_file(out_dir))
            sched.write()
            _say(f"{PROG}: starting the server (one load; {len(todo)} cell(s) to measure)")
            stop["proc"] = start_server(plans["live"], opts.startup_timeout)
            server = connect(stop["proc"])
            tail = ProfileTail(out_dir / "profile-0.jsonl")
            driver = Driver(server, opts, prompt_set, tail, stop["proc"].proc.pid)
            interrupts.run(_cells(driver, sched, results, todo, ctx))
            table_path, initial, _, _ = write_config(
                results.of_kind("cell"), opts, out_dir, release
            )
            if table_path:
                interrupts.run(
                    _validate(driver, sched, results, table_path, initial, levels, ctx, release)
                )
            stop["proc"].stop()
            stop["proc"] = None
        for name in dict.fromkeys(k.arm for k in arm_todo):
            _say(f"{PROG}: starting the {name} server (a separate load)")
            stop["proc"] = start_server(plans[name], opts.startup_timeout)
            server = connect(stop["proc"])
            # unprofiled; its server's CPU seconds recorded as the live cells' are
            pid = stop["proc"].proc.pid
            driver = Driver(server, opts, prompt_set, ProfileTail(None), pid)
            for key in [k for k in arm_todo if k.arm == name]:
                zero = results.records.get(Key("cell", key.level, 0))
                rounds = zero["rounds"] if zero else 1  # the same load as the steps-0 cell
                rec = interrupts.run(driver.measure(key.level, rounds))
                results.append({"kind": "arm", "arm": name, **rec, **_settings(ctx)})
                progress.done(key, rec)
            stop["proc"].stop()
            stop["proc"] = None
    except (KeyboardInterrupt, sw.Interrupted):
        progress.close()
        if stop["proc"] is not None:
            stop["proc"].stop()
        n = len(results.records) - results.resumed
        _say(
            f"\n{PROG}: interrupted; the server is stopped. {n} measurement(s) of this run "
            f"kept in {opts.results}: rerun the same command to resume."
        )
        return EXIT_INTERRUPTED
    finally:
        signals.close()
        if stop["proc"] is not None:
            stop["proc"].stop()
    progress.close()
    report(opts, results, out_dir, steps, release, ctx)
    return 0
