"""bench compare's (and ab's) report: per level the best arm and every arm's ratio to
it; each other arm against the first (the reference): the side-by-side table (two arms),
crossovers, the lossless check and a recommendation; the records."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sgl_eagle_ext.common import figures
from sgl_eagle_ext.common.errors import EXIT_USAGE
from sgl_eagle_ext.tools.bench import compare, lossless, records, session
from sgl_eagle_ext.tools.bench.arm_runs import ArmRun, Options, Run, settings_fields
from sgl_eagle_ext.tools.bench.progress import Console


def settings_lines(out, run: Run) -> None:
    """Under the verdicts: what else differed between the arms (--allow-unequal)."""
    for name, values in (run.settings.get("unequal") or {}).items():
        shown = ", ".join(f"{k} {v}" for k, v in values.items())
        out(f"UNEQUAL ARMS (--allow-unequal): {name} differs ({shown}); the ratios include it")


def _open_loop_fields(run: Run) -> dict:
    """An open-loop run's arrival process, for the ab/compare summary record."""
    ol = run.open_loop
    if ol is None:
        return {}
    return {
        "arrival": ol.arrival,
        "burstiness": ol.shape,
        "max_concurrency": ol.max_concurrency,
        "duration": ol.duration,
    }


def _summary_provenance(run: Run, preset: str) -> dict:
    ref, last = run.arms[0], run.arms[-1]
    return {
        "host": run.host,
        "prompts": ref.prov["prompts"],
        "server": {
            "url": " | ".join(a.server.base_url for a in run.arms),
            "preset": preset,
            "sglang_version": last.server.version,
            "model_path": last.prov["server"].get("model_path")
            or ref.prov["server"].get("model_path"),
            "draft_model_path": next(
                (
                    a.prov["server"].get("draft_model_path")
                    for a in run.arms
                    if a.prov["server"].get("draft_model_path")
                ),
                None,
            ),
        },
        "arms": {a.plan.label: a.prov["server"] for a in run.arms},
    }


def _plot_hint(console: Console, rec: records.Recorder) -> None:
    if rec.written:
        console.info(
            f"records appended to {rec.jsonl} (and {rec.csv}); plot with: python -m "
            f"{session.PROG} plot {rec.jsonl} --run-id {rec.run_id}"
        )


@dataclass(frozen=True)
class Against:
    """One arm against the reference: the A/B view of the pair."""

    name: str
    table: list[str]  # the side-by-side lines
    pairs: list[compare.Pair]
    throughput: figures.Crossover
    goodput: figures.Crossover
    lossless: lossless.Verdict | None
    advice: str


def against(run: Run, arm: ArmRun, slo_text: str) -> Against:
    ref = run.arms[0]
    a, b = ref.plan.preset, arm.plan.preset
    table, pairs = compare.side_by_side(run.levels, ref.fields, arm.fields, a, b, run.axis)
    xs = [p.level for p in pairs]
    thr = compare.crossover(xs, [p.throughput_ratio for p in pairs])
    good = compare.crossover(xs, [p.goodput_ratio for p in pairs])
    ll = (
        lossless.compare(run.check_prompts, ref.outputs, arm.outputs) if run.check_prompts else None
    )
    verdict = ll.verdict if ll else None
    advice = compare.recommend(a, b, thr, good, pairs, verdict, slo_text, run.axis)
    return Against(b, table, pairs, thr, good, ll, advice)


def report(opts: Options, console: Console, run: Run) -> int:
    """bench compare's report (bench ab: the same, of two arms): per level the best arm
    and every arm's ratio to it; each other arm against the first (the reference): the
    side-by-side table (two arms), crossovers, the lossless check and a recommendation."""
    axis, levels, slo, rec = run.axis, run.levels, run.slo, run.rec
    names = [a.plan.preset for a in run.arms]
    ref = names[0]
    per_arm = {a.plan.preset: a.fields for a in run.arms}
    rows = compare.by_level(levels, per_arm)
    good_rows = compare.by_level(levels, per_arm, "goodput_tok_s") if slo.set else []
    slo_text = slo.describe() if slo.set else ""
    others = [against(run, a, slo_text) for a in run.arms[1:]]
    out = console.out
    out("")
    title = "A/B" if opts.kind == "ab" else "compare"
    out(f"=== {title} {rec.run_id}: {', '.join(names)} (reference {ref}) ===")
    for line in others[0].table if len(others) == 1 else compare.arms_table(rows, names, axis):
        out(line)
    for name, why in run.failed.items():
        out(f"not compared: {name} failed ({why})")
    out(compare.best_arm_line(rows, axis))
    if good_rows:
        out(compare.best_arm_line(good_rows, axis).replace("throughput", f"goodput ({slo_text})"))
    for x in others:
        out(
            compare.crossover_line(f"throughput, {x.name} vs {ref}", x.throughput, levels[-1], axis)
        )
        if slo_text:
            what = f"latency goodput ({slo_text}), {x.name} vs {ref}"
            out(compare.crossover_line(what, x.goodput, levels[-1], axis))
    if not run.check_prompts:
        out("lossless: skipped (--lossless-prompts 0)")
    for x in others:
        for line in lossless.verdict_lines(x.lossless, ref, x.name) if x.lossless else []:
            out(line)
    for x in others:
        out(f"recommendation ({x.name} vs {ref}): {x.advice}")
    settings_lines(out, run)
    thin = compare.sample_size_warning(levels, per_arm, axis)
    if thin:
        console.warn(thin)
    prov = _summary_provenance(run, " vs ".join(names))
    for x in others:
        if x.lossless:
            fields = {"status": "ok", "arm": f"{ref} vs {x.name}", "temperature": 0.0}
            fields["max_tokens"] = opts.launch.lossless_max_tokens
            rec.write("lossless", {**fields, **asdict(x.lossless)}, prov)
    rec.write(
        "compare",
        {
            "status": "ok",
            "arm": " vs ".join(names),
            "arms": names,
            "reference": ref,
            "level_key": axis.key,
            **_open_loop_fields(run),
            "levels": list(map(asdict, rows)),
            "goodput_levels": list(map(asdict, good_rows)),
            # each other arm against the reference, level by level (the A/B table)
            "pairs": {x.name: [p.record(axis) for p in x.pairs] for x in others},
            "crossover_throughput": {x.name: asdict(x.throughput) for x in others},
            "crossover_goodput": {x.name: asdict(x.goodput) for x in others if slo_text},
            "slo": slo.record(),  # every goal set (e2e and itl too)
            "lossless": {x.name: x.lossless.verdict for x in others if x.lossless},
            "lossless_detail": {
                x.name: {
                    "differences": list(map(asdict, x.lossless.differences)),
                    "failed": list(map(asdict, x.lossless.failed)),
                }
                for x in others
                if x.lossless
            },
            "recommendation": {x.name: x.advice for x in others},
            "failed_arms": run.failed,
            "failed_arm_kinds": run.failed_kinds,
            "sample_size_warning": thin,
            "max_tokens": opts.requests.max_tokens,
            **settings_fields(run.settings),
        },
        prov,
    )
    _plot_hint(console, rec)
    differs = any(x.lossless and x.lossless.verdict == "DIFFERS" for x in others)
    if run.refused:
        return EXIT_USAGE
    return session.EXIT_FAILED if differs or run.failed else 0
