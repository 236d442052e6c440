"""tune --live's pieces without a server (results file, schedule, verdicts, the table
from measured cells, the schedule file), and offline tune on a tree log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.in_sglang import schedule_control
from sgl_eagle_ext.profiling.recorder import window
from sgl_eagle_ext.profiling.recorder.cycles import Resolved
from sgl_eagle_ext.tools.tune import live, live_report
from sgl_eagle_ext.tools.tune.live_results import Key, Results, fit, schedule, steps_priority


def cell(level, steps, tok_s, accept=None, cycle=100.0):
    return {
        "kind": "cell",
        "level": level,
        "steps": steps,
        "client": {"output_tok_s": tok_s},
        "profile": {"accept_len": accept or (1.0 if steps == 0 else 2.0), "cycle_ms": cycle},
    }


def test_schedule_order_and_budget():
    assert steps_priority([0, 1, 2, 3, 5]) == [0, 1, 5, 3, 2]
    assert steps_priority([0, 1, 2, 3, 4, 5, 6, 7]) == [0, 1, 7, 4, 2, 3, 5, 6]
    keys = schedule([4, 1], [0, 1, 3])
    assert keys[:2] == [Key("cell", 1, 0), Key("cell", 4, 0)]
    assert keys[-1] == Key("cell", 4, 3) or keys[-1] == Key("cell", 4, 1)
    assert fit(keys, 10.0, 45.0, reserve=2) == keys[:2]
    assert fit(keys, 10.0, 5.0, reserve=2) == []


def test_results_append_resume_and_refuse_another_setup(tmp_path):
    path = tmp_path / "r.jsonl"
    r = Results(path, {"model_path": "a"}).load()
    r.append(cell(1, 0, 5.0))
    r.append(cell(1, 3, 7.0))
    with open(path, "a") as f:
        f.write('{"kind": "cell", "lev')  # a crash mid-line: measured again
    again = Results(path, {"model_path": "a"}).load()
    assert again.resumed == 2 and again.has(Key("cell", 1, 3)) and not again.has(Key("cell", 2, 0))
    with pytest.raises(UserError, match="differs in model_path"):
        Results(path, {"model_path": "b"}).load()


def test_verdicts_crossover_and_table_from_measured_cells():
    cells = [
        cell(1, 0, 10.0),
        cell(1, 1, 12.0),
        cell(1, 3, 13.0),
        cell(4, 0, 30.0),
        cell(4, 1, 29.0),
        cell(4, 3, 20.0),
    ]
    v = live_report.verdicts(cells)
    assert v[1] == (
        True,
        "c=1: 3 steps pays 1.30x against 0 steps on this server (13.00 vs 10.00 tok/s).",
    )
    assert live_report.verdict_basis(cells).startswith("verdicts against 0 steps on this server")
    assert v[4][0] is False and v[4][1].startswith("c=4: do not draft")
    assert live_report.crossover_line(v) == (
        "crossover: drafting pays up to 1 stream(s); from 4 do not draft"
    )
    table, picks = live_report.adaptive_table(cells)
    assert table == {"1": [1, 3], "4": [0]}  # 1.30x >= 1.15: no floor at one stream
    sentence, text = live_report.recommended_fixed(cells, None)
    assert "3-step chain" in sentence and "speculative-num-steps = 3" in text
    lines = live_report.table_lines(cells, [0, 1, 3])
    assert "13.00 2.00 100*" in lines[3]


def test_verdict_uses_the_baseline_arm_and_states_both_ratios():
    """--baseline-arm: the verdict is against the baseline server (the preset the user
    would otherwise run), with the in-server 0-step ratio beside it; a level the arm did
    not measure stays against 0 steps, and the basis line says which is which."""
    cells = [cell(1, 0, 10.0), cell(1, 3, 13.0), cell(2, 0, 20.0), cell(2, 3, 22.0)]
    arm = [{"kind": "arm", "arm": "baseline", "level": 1, "client": {"output_tok_s": 12.8}}]
    tree = [{"kind": "arm", "arm": "eagle3-2step", "level": 2, "client": {"output_tok_s": 9.0}}]
    v = live_report.verdicts(cells, arm + tree)
    # 1.30x against 0 steps, but 1.02x against the baseline server: not worth drafting
    assert v[1] == (
        False,
        "c=1: do not draft (the best drafting cell, 3 steps, gives 1.02x against the baseline "
        "server: 13.00 vs 12.80 tok/s); 1.30x against 0 steps on this server (10.00 tok/s).",
    )
    assert v[2][0] is True and "against 0 steps on this server" in v[2][1]
    assert live_report.verdict_basis(cells, arm + tree) == (
        "verdicts against the baseline server (--baseline-arm, same load); "
        "against 0 steps on this server at c=2"
    )


def test_a_draft_never_accepted_never_pays_whatever_the_noise():
    never = [cell(1, 0, 10.0), cell(1, 1, 11.2, accept=1.0), cell(1, 3, 9.0, accept=1.0)]
    for c in never:
        c["profile"]["cycles"] = 7
    assert live_report.best(live_report.grid(never)[1]) == 0  # 1.12x was the host's noise
    v = live_report.verdicts(never)
    assert v[1] == (False, "c=1: do not draft (no draft token was accepted).")
    assert live_report.adaptive_table(never)[0] == {"1": [0]}
    never[1]["profile"]["accept_len"] = 1.4  # one accepted: measured tok/s decides again
    assert live_report.best(live_report.grid(never)[1]) == 1


def test_schedule_file_is_what_the_controller_reads(tmp_path):
    s = live.Schedule(tmp_path / "schedule.json")
    s.write(pin=3)
    rank0 = schedule_control.Controller(str(s.path), rank_fn=lambda: 0)  # reads requests
    rank0.on_idle()  # written while idle: in force from the next verify
    first = rank0.on_verify()
    assert first.pin == 3
    s.write(table="/x/t.json", initial_steps=2)
    rank0.on_idle()
    second = rank0.on_verify()
    assert second.table == "/x/t.json" and second.seq == first.seq + 1


def tree_log(tmp_path):
    cycles = [Resolved("decode", 1, 16, {"cycle": 30.0, "draft": 3.0}, [3], 0, 2)] * 12
    line = window.log_line(window.summarize(cycles, 0, "cuda"))
    args = {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 16,
        "speculative_draft_model_path": "/d",
    }
    path = tmp_path / "eagle3-2step.log"
    path.write_text(f"[t] server_args={args}\n[t] {line}\n")
    return path


def test_offline_tune_on_a_tree_log_says_why_and_ranks_it_with_grid(tmp_path):
    log = tree_log(tmp_path)
    cmd = [sys.executable, "-m", "sgl_eagle_ext.tune", str(log), "--baseline-tps", "80"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "a tree (topk 4, 16 draft tokens; 12 decode cycles)" in p.stderr
    assert "no EAGLE3_PROFILE decode windows" not in p.stderr and "--grid" in p.stderr
    p = subprocess.run([*cmd, "--grid"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if "measured (eagle3-2step.log)" in ln)
    assert row.split()[:3] == ["2", "4", "16"]


# -- what the servers can batch, before the load ----------------------------------------


@pytest.fixture
def pair(tmp_path):
    """Config-only target and draft (resolution reads the configs, nothing loads)."""
    import json

    out = {}
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 512,
        "max_position_embeddings": 2048,
    }
    draft = {**base, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}
    for name, cfg in (("target", base), ("draft", draft)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
        out[name] = str(tmp_path / name)
    return out


def _tune(pair, tmp_path, *more: str) -> list[str]:
    return [
        "--live",
        "--model-path",
        pair["target"],
        "--draft-model-path",
        pair["draft"],
        "--results",
        str(tmp_path / "tl" / "results.jsonl"),
        *more,
    ]


@pytest.fixture
def no_start(monkeypatch):
    """Predicted resolution (no SGLang subprocess), and no server may start."""
    from sgl_eagle_ext.common import releases
    from sgl_eagle_ext.tools.bench import arms

    own = releases.installed_version  # this process's release still resolves the table
    monkeypatch.setattr(
        releases, "installed_version", lambda python=None, env=None: None if python else own()
    )

    def refuse(plan):
        raise AssertionError(f"a server was started: {plan.preset}")

    monkeypatch.setattr(arms, "LauncherProcess", refuse)


def test_live_pins_a_pool_and_graphs_for_the_largest_level():
    from sgl_eagle_ext.common import releases

    r = releases.BY_VERSION["0.5.23"]
    pins = live.server_pins([1, 64], r, cpu=False, extra=["--port", "1"])
    assert pins[:4] == ["--port", "1", "--max-running-requests", "64"]
    i = pins.index("--cuda-graph-bs-decode")
    assert pins[pins.index("--cuda-graph-max-bs-decode") + 1] == "64"
    assert pins[i + 1 : i + 4] == ["1", "2", "3"] and pins[-1] == "64"
    # the user's own value stays (and is checked), graphs are not pinned on CPU
    mine = ["--max-running-requests", "32"]
    assert live.server_pins([1, 64], r, cpu=True, extra=mine) == mine


def test_live_refuses_a_level_the_server_cannot_batch_before_the_load(
    pair, tmp_path, capsys, no_start
):
    """The user's own pool of 32 with a level of 64: no batch of 64 would ever run (its
    rounds would count 0 cycles): refused with the fix before anything starts."""
    from sgl_eagle_ext.tools.tune import cli as tune_cli

    argv = _tune(pair, tmp_path, "--levels", "1,64", "--", "--max-running-requests", "32")
    assert tune_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "--levels 64: max_running_requests resolves to 32 (predicted from the release table "
        "for SGLang 0.5.23), so no batch of 64 ever runs (the live server)." in err
    )
    assert "fix: drop those levels, or pass -- --max-running-requests 64" in err
    assert "Traceback" not in err
    # left to tune --live: the pool and the graphs reach 64 on every server, and the
    # servers (live, baseline arm, tree arm) differ only in speculation
    from sgl_eagle_ext.launcher import fairness

    opts, _ = tune_cli.live_options(_tune(pair, tmp_path, "--baseline-arm", "--also-trees")[1:])
    levels, out = [1, 64], tmp_path / "tl"
    from sgl_eagle_ext.common import releases

    extra = live.server_pins(levels, releases.BY_VERSION["0.5.23"], False, [])
    plans = {
        "live": live.plan_server(
            str(live.live_preset(opts.preset_file, out, levels, [0, 1, 3])),
            opts,
            out / "l.log",
            extra,
        )
    }
    for name in ("baseline", "eagle3-2step"):
        arm = live.arm_preset(opts.preset_file, out, name)
        plans[name] = live.plan_server(arm, opts, out / "a.log", extra)
    settings = live.check_servers(plans, levels)
    assert settings["fair"] and settings["unequal"] == {}
    resolved = fairness.resolve_arms({k: p.launch for k, p in plans.items()})
    for r in resolved.values():
        assert r.fields["max_running_requests"] == 64
        assert max(r.fields["cuda_graph_config.decode.bs"]) == 64


@pytest.mark.harness
@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_live_servers_resolved_by_sglang_batch_every_level_alike(pair, tmp_path, capsys, cpu):
    """SGLang's own resolution (one subprocess, nothing loads) of the run's servers: the
    live adaptive server, the baseline arm and the tree arm can all batch the largest
    level and differ only in speculation."""
    from sgl_eagle_ext.common import releases

    more = ["--baseline-arm", "--also-trees"] + (["--cpu"] if cpu else [])
    from sgl_eagle_ext.tools.tune import cli as tune_cli

    opts, _ = tune_cli.live_options(_tune(pair, tmp_path, *more)[1:])
    levels, out = [1, 2, 16], tmp_path / "tl"
    out.mkdir()
    # no GPU here for SGLang to detect; the tiny models' context, not the presets' pin
    user = [] if cpu else ["--device", "cuda", "--context-length", "2048"]
    extra = live.server_pins(levels, releases.BY_VERSION["0.5.23"], cpu, user)
    preset = str(live.live_preset(opts.preset_file, out, levels, [0, 1, 3]))
    plans = {"live": live.plan_server(preset, opts, out / "l.log", extra)}
    for name in ("baseline", "eagle3-2step"):
        arm = live.arm_preset(opts.preset_file, out, name)
        plans[name] = live.plan_server(arm, opts, out / "a.log", extra)
    settings = live.check_servers(plans, levels)
    said = capsys.readouterr().out
    # each server is waited for as long as the launcher's own estimate for it: the live
    # one builds a runtime state per step (3, 0, 1), the fixed ones one
    from sgl_eagle_ext.launcher import readiness, running

    waits = {k: running.default_startup_timeout(p.launch) for k, p in plans.items()}
    assert waits["live"] == readiness.default_startup_timeout(3)
    assert waits["baseline"] == waits["eagle3-2step"] == readiness.default_startup_timeout(1)
    assert "by SGLang 0.5.23" in said and settings["fair"], said
    # the environments differ in the profile the live server measures with, and only
    # there (the schedule file and the adaptive preset's switches are speculative)
    envs = {k for k in settings["inherent"] if k.startswith("env ")}
    assert envs == {"env EAGLE3_PROFILE", "env EAGLE3_PROFILE_FILE"}, settings["inherent"]
    assert "note: env EAGLE3_PROFILE differs (live 1, baseline unset, eagle3-2step unset)" in said
    # the user's own smaller pool is SGLang's answer too, and refused
    small = [*user, "--max-running-requests", "8"]
    extra = live.server_pins(levels, releases.BY_VERSION["0.5.23"], cpu, small)
    plans = {"live": live.plan_server(preset, opts, out / "l.log", extra)}
    with pytest.raises(
        UserError, match=r"--levels 16: max_running_requests resolves to 8 \(by SGLang"
    ):
        live.check_servers(plans, levels)


def test_tune_live_reaches_its_server_as_the_launcher_trusts_it(tmp_path):
    """A server started with its own --ssl-certfile (self-signed) serves https: tune live
    connects and measures over it with that certificate alone (the launcher's trust)."""
    import asyncio
    import ssl

    from fakes.fake_sglang import Background, FakeSGLang

    from sgl_eagle_ext.common import http
    from sgl_eagle_ext.tools.bench import prompts
    from sgl_eagle_ext.tools.tune.live_driver import Driver, ProfileTail
    from sgl_eagle_ext.tools.tune.live_options import LiveOptions
    from tests.test_http_origin_tls import make_cert

    cert, key = make_cert(tmp_path)
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(cert, key)

    class Started:  # a launcher process whose server is up
        api_key = None
        tls = http.tls_context(cafile=str(cert), pinned=True)

    with Background(FakeSGLang(accept_length=2.0), tls=served) as bg:
        Started.url = bg.url
        assert bg.url.startswith("https://")
        server = live.connect(Started())
        opts = LiveOptions(model_path="m", draft_model_path="d", max_tokens=4, warmup_tokens=0)
        driver = Driver(server, opts, prompts.load("mixed"), ProfileTail(None))
        rec = asyncio.run(driver.measure(2, rounds_at_most=1))
    got = rec["client"]
    assert (got["requests"], got["failed"], got["output_tokens"]) == (2, 0, 8), rec


def test_missing_model_folders_are_refused_before_any_file_is_written(tmp_path, capsys):
    """The run's preset, table and schedule go beside --results: a path typo is refused
    first (as the launcher refuses it), and nothing of the run is left behind."""
    from sgl_eagle_ext.tools.tune import cli as tune_cli

    out = tmp_path / "run" / "r.jsonl"
    argv = ["live", "--model-path", str(tmp_path / "nope"), "--draft-model-path", "d"]
    assert tune_cli.main([*argv, "--cpu", "--results", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--model-path {tmp_path / 'nope'}: no such directory" in err and "Traceback" not in err
    assert not out.parent.exists()
