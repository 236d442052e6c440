"""bench compare's (and ab's) run: each preset started in turn through the launcher
(bad input fails while planning, before any server starts), warmed up, swept at every
level, its lossless-check outputs generated, stopped. Every arm gets the same prompts in
the same seeded order, the same lengths and levels. Its typed options are here too."""

from __future__ import annotations

import re
import shlex
import string
from dataclasses import dataclass, field, replace
from http.client import HTTPException
from pathlib import Path

from sgl_eagle_ext.common import http, interrupts, ports, secret_flags
from sgl_eagle_ext.common.cli_args import integer, port_number
from sgl_eagle_ext.common.declared_flags import flag
from sgl_eagle_ext.common.errors import EXIT_USAGE, UserError
from sgl_eagle_ext.common.server_flags import ServerFlags
from sgl_eagle_ext.tools.bench import (
    arms,
    loads,
    lossless,
    options,
    probe,
    prompts,
    provenance,
    records,
    session,
    startup,
    workload,
)
from sgl_eagle_ext.tools.bench import sweep as sw
from sgl_eagle_ext.tools.bench.levels import above
from sgl_eagle_ext.tools.bench.progress import Console


@dataclass(frozen=True)
class LaunchOptions(ServerFlags):
    """How every arm's server starts, and the lossless check (each field its flag)."""

    port: int = flag(  # 0: a free one
        "--port", default=0, type=port_number, help="server port (default: a free one)"
    )
    log_dir: Path = flag(
        "--log-dir",
        cli_default="logs",
        check=lambda _n, d: Path(d),
        help="server logs (default logs/)",
    )
    lossless_prompts: int = flag(  # 0 skips the check
        "--lossless-prompts",
        default=lossless.DEFAULT_PROMPTS,
        type=integer(),
        check=above(0, zero_ok=True),
        help=f"prompts for the lossless check (default {lossless.DEFAULT_PROMPTS}; 0 skips it)",
    )
    lossless_max_tokens: int = flag(
        "--lossless-max-tokens", default=lossless.DEFAULT_MAX_TOKENS, type=integer(), help=None
    )


@dataclass(frozen=True)
class Options:
    """bench ab's or bench compare's flags, read."""

    kind: str  # "ab" or "compare": how it was asked for (the logs' name, the title)
    presets: list[str]  # ab: --preset-a, --preset-b; compare: each --arm, in order
    connection: options.ConnectionOptions  # the groups' checks run in this order
    workload: workload.WorkloadOptions
    requests: options.RequestOptions
    sweep: options.SweepOptions
    launch: LaunchOptions
    records: options.RecordOptions


@dataclass
class ArmRun:
    plan: arms.ArmPlan
    server: probe.Server
    prov: dict
    outcome: sw.SweepOutcome
    outputs: list = field(default_factory=list)  # lossless-check generations

    @property
    def fields(self) -> dict[float, dict]:
        return {lv.concurrency: lv.fields for lv in self.outcome.levels}


@dataclass
class Run:
    """Everything an A/B or compare report needs."""

    rec: records.Recorder
    levels: list[float]
    open_loop: loads.OpenLoop | None
    slo: loads.SLO
    ps: prompts.PromptSet | workload.WorkloadSet  # what every arm is sent
    host: dict
    check_prompts: list
    arms: list[ArmRun]  # the arms that ran to the end, in order
    failed: dict[str, str] = field(default_factory=dict)  # preset -> why it failed
    failed_kinds: dict[str, str] = field(default_factory=dict)  # preset -> failure_kind
    refused: bool = False  # an arm's launcher refused its input (bad input: exit 2)
    settings: dict = field(default_factory=dict)  # the arms' settings check (fairness)

    @property
    def axis(self) -> loads.Axis:
        return loads.RATE if self.open_loop else loads.CONCURRENCY

    def fail(self, plan: arms.ArmPlan, why: str, kind: str, console: Console) -> None:
        """An arm that did not run to the end: recorded, and said on one error line."""
        self.failed[plan.preset], self.failed_kinds[plan.preset] = why, kind
        console.error(f"[{plan.label}] {plan.preset} failed: {why}")


async def _arm(server, opts: Options, console, run: Run, prov, plan, hook):
    """One arm's warm-up, sweep and lossless-check generations."""
    conn, req = opts.connection, opts.requests
    common = {
        "arm": plan.preset,
        "arm_label": plan.label,
        "url": server.base_url,
        **session.load_fields(session.load(req), conn),
        **settings_fields(run.settings),
    }
    async with session.client(server, conn, req) as client:
        outcome = await session.warm_and_sweep(
            client,
            server,
            opts,
            run.ps,
            run.levels,
            console,
            run.rec,
            common,
            prov,
            arm=f"{plan.label}: {plan.preset}",
            slo=run.slo,
            derive_slo=not run.arms,  # the first arm that runs sets the default SLO (ab)
            open_loop=run.open_loop,
            hook=hook,
        )
        outputs = []
        check_prompts = run.check_prompts
        if check_prompts and not outcome.stopped:
            console.info(
                f"[{plan.label}] lossless-check generations: {len(check_prompts)} "
                f"prompt(s), temperature 0"
            )
            outputs, interrupted = await lossless.generate(
                client,
                check_prompts,
                opts.launch.lossless_max_tokens,
                console,
                f"{plan.label} lossless",
            )
            if interrupted:
                raise sw.Interrupted("during the lossless generations")
    return outcome, outputs


def run_arms(opts: Options, extra: list[str], console: Console):
    """Start, sweep and stop each preset in turn. Returns the Run, or an exit code when
    an arm did not start or its server died (the finished levels are recorded)."""
    presets, kind, launch, sweep = opts.presets, opts.kind, opts.launch, opts.sweep
    # A key for the servers travels to each launcher in its environment: never on a
    # printed line or a child's command line.
    extra, secrets = secret_flags.take(extra)  # --admin-api-key etc. likewise
    api_key = secrets.pop("api-key", None) or opts.connection.api_key
    opts = replace(opts, connection=replace(opts.connection, api_key=api_key))
    conn, req = opts.connection, opts.requests
    # --dataset/--input-len/...: checked now, before any server starts
    levels, open_loop, ps, wl = workload.plan(sweep, opts.workload, req, opts.records.results)
    rec = session.recorder(opts.records, conn)
    log_dir = launch.log_dir
    # outside the kernel's ephemeral range: no outgoing connection (health probes
    # included) can take it while a server loads for minutes
    port = launch.port or ports.pick()
    labels = string.ascii_uppercase[: len(presets)]
    plans = [
        arms.plan_arm(
            label,
            preset,
            server=launch,
            port=port,
            log_file=log_dir / f"{kind}-{rec.run_id}-{label}-{Path(preset).stem}.log",
            extra=extra,
        )
        for label, preset in zip(labels, presets)
    ]
    # the arms differ only in speculation, or the run stops here, before any weights load
    verdict = arms.check_fair(plans, launch.allow_unequal, console.info)
    settings = verdict.record() if verdict else {}
    host = provenance.host_facts()
    slo = replace(sweep.slo)  # a copy: ab's first arm may derive default goals into it
    check_prompts = ps.take(launch.lossless_prompts, req.seed) if launch.lossless_prompts else []
    title = "A/B" if kind == "ab" else "compare"
    console.info(
        f"{title} run {rec.run_id}: "
        + ", ".join(f"{p.label} = {p.preset}" for p in plans)
        + f"; levels: {loads.describe_levels(levels, open_loop, sweep.duration)}; "
        + (wl.describe() if wl is not None else f"{req.max_tokens} tokens per request")
        + f"; prompts {ps.name}"
    )
    run = Run(rec, levels, open_loop, slo, wl or ps, host, check_prompts, [], settings=settings)
    for plan in plans:
        console.info(f"[{plan.label}] starting {plan.preset}: {shlex.join(plan.command)}")
        plan.api_key = conn.api_key
        proc = None
        try:
            # Any failure of one arm (its server never READY, an HTTP failure while
            # probing or sweeping it, its server dying): one error line, the arm is
            # marked failed, and the next arm still runs.
            plan.secret_env = secret_flags.to_environment(secrets)
            proc = arms.LauncherProcess(plan)
            url = startup.wait_ready(
                proc, plan.label, plan.facts.get("log_file"), launch.startup_timeout, console
            )
            # a server on its own certificate (--ssl-certfile): trusted as the launcher
            # trusts it, unless --insecure or --ca-cert say how (ConnectionOptions.tls)
            arm_conn = replace(conn, server_tls=proc.tls)
            server = session.connect(url, arm_conn)
            console.info(f"[{plan.label}] ready: {session.describe(server)}")
            if wl is not None and wl.server is None:  # every arm: the same prompts
                wl.attach(server)
                console.info(f"workload: {wl.describe()}")
            prov = {
                "host": host,
                "server": provenance.server_facts(server, launch=plan.facts),
                "prompts": session.prompt_facts(wl or ps, req.seed),
                **({"workload": wl.facts()} if wl is not None else {}),
            }
            hook = workload.LevelHook(
                opts.workload.save_requests,
                wl,
                {"run_id": rec.run_id, "arm": plan.preset},
                console,
                open_loop,
            )
            outcome, outputs = interrupts.run(
                _arm(server, replace(opts, connection=arm_conn), console, run, prov, plan, hook)
            )
        except ARM_FAILURES as e:
            if isinstance(e, arms.ArmFailed) and e.code == EXIT_USAGE:
                run.refused = True  # the launcher refused its input: the run exits 2
            run.fail(plan, arm_error(e), failure_kind(e), console)
            continue
        finally:
            if proc is not None:
                code = proc.stop()
                console.info(
                    f"[{plan.label}] {plan.preset} stopped "
                    f"({'cleanly' if proc.stopped_cleanly else f'exit code {code}'})"
                )
        if outcome.stopped:
            why = f"{outcome.stopped} (its finished levels are recorded)"
            run.fail(plan, why, "stopped", console)
            continue
        run.arms.append(ArmRun(plan, server, prov, outcome, outputs))
    if len(run.arms) < 2:
        ran = f"only {run.arms[0].plan.preset} ran" if run.arms else "no arm ran"
        console.error(
            f"{len(run.failed)} of {len(plans)} arm(s) failed and {ran}: nothing to compare"
            + ("; its sweep is recorded" if run.arms else "")
        )
        return EXIT_USAGE if run.refused else session.EXIT_FAILED
    return run


def settings_fields(settings: dict | None) -> dict:
    """Beside every figure: whether the arms' resolved settings differed only in
    speculation, and (--allow-unequal) what else differed."""
    if not settings:
        return {}
    return {"arms_equal": settings["fair"], "arm_settings": settings}


# What ends one arm, not the run: the launcher's own failure, a server that answers
# wrongly or not at all (the project's HTTP error, the standard library's), the OS.
ARM_FAILURES = (arms.ArmFailed, UserError, http.HTTPFailed, HTTPException, OSError)


def arm_error(e: BaseException) -> str:
    """One line for an arm's failure: the message's first line, and for a launcher that
    exited before READY the last line it printed."""
    text = str(e.message if isinstance(e, UserError) else e).strip() or type(e).__name__
    first, *rest = text.splitlines()
    if isinstance(e, (HTTPException, OSError)) and type(e).__name__ not in first:
        first = f"{type(e).__name__}: {first}"
    lines = [x.strip() for x in rest if x.strip() and not x.strip().startswith("File ")]
    # the launcher's tail ends with its own shutdown lines: the cause is the last error
    cause = next((x for x in reversed(lines) if ERROR_LINE.search(x)), lines[-1] if lines else "")
    return f"{first.rstrip(':')}: {cause}" if cause else first


def failure_kind(e: BaseException) -> str:
    """What ended an arm, as one word for the record: refused (the launcher refused its
    input), exited (the launcher stopped before READY), not_ready (startup timeout),
    server (after READY it answered wrongly or not at all: probing, workload and
    sweep errors all reach here as the project's HTTP error or a UserError), os;
    "stopped" is a sweep the server's death ended midway."""
    if isinstance(e, arms.ArmFailed):
        return e.kind
    if isinstance(e, (UserError, http.HTTPFailed, HTTPException, ConnectionError, TimeoutError)):
        return "server"
    return "os"


ERROR_LINE = re.compile(r"error|exception|refused|failed|not found|no such", re.IGNORECASE)
