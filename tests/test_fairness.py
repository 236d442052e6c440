"""Arms that differ only in speculation (launcher/fairness.py).

For every release in the release table and every pair of shipped presets, the resolved
settings differ only in speculative settings: SGLang's own resolution on the harness
releases (the preflight's probe, asked for every preset at once, on a GPU as shipped
and under the CPU overlay), the table's predicted rules on the others. The predicted rules
agree with SGLang's resolution for every field they predict. An arm list that leaves a
setting to SGLang (the presets before the pins) is caught by both, naming the flag.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from pathlib import Path

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError
from sgl_eagle_ext.launcher import fairness, presets
from sgl_eagle_ext.launcher import plan as launch_plan
from sgl_eagle_ext.launcher.preflight import ask_sglang, hosts, probe_cache

ROOT = Path(__file__).resolve().parents[1]
HARNESS = {"0.5.23": ROOT / ".venv", "0.5.10.post1": ROOT / ".venv-0.5.10.post1"}
PRESETS = ("baseline", "eagle3-2step", "eagle3-3step", "eagle3-5step", "eagle3-adaptive")
# The tiny pair's public config fields (a 4-layer Llama and its one-layer EAGLE-3 draft):
# resolution reads the configs only.
TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 4,
    "vocab_size": 512,
    # the presets pin --context-length 131072 (Kimi-K2.5's draft's) for the GPU host
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}
DRAFT = {
    **TARGET,
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "draft_vocab_size": 512,
}
# The presets as they were before the pins: SGLang decides these per arm.
UNPINNED = "max-running-requests = false\nrandom-seed = false\ncuda-graph-bs = false\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pair")
    out = {}
    for name, cfg in (("target", TARGET), ("draft", DRAFT)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
        out[name] = str(root / name)
    return out


def _presets_for(version: str) -> list[str]:
    # the launcher refuses eagle3-adaptive where SGLang has no adaptive (0.5.10.post1)
    # or no 0-step candidates, which its table lists (0.5.13.post1)
    spec = releases.BY_VERSION[version].adaptive
    return [p for p in PRESETS if p != "eagle3-adaptive" or (spec and spec.min_step == 0)]


def _plan(preset: str, models, version: str, cpu: bool, unpinned_dir: Path | None = None):
    is_file = unpinned_dir is not None
    if is_file:
        path = unpinned_dir / f"{preset}.toml"
        path.write_text(f'extends = "{preset}"\n[server]\n{UNPINNED}')
    return launch_plan.build(
        launch_plan.LaunchRequest(
            preset=None if is_file else preset,
            preset_file=str(path) if is_file else None,
            model_path=models["target"],
            draft_model_path=models["draft"],
            cpu=cpu,
            sglang_version=version,
            # as shipped (for the GPU host): the device is explicit only because this
            # machine has none for SGLang to detect
            extra=() if cpu else ("--device", "cuda"),
        )
    )


def _predicted(plans: dict) -> dict:
    return {k: fairness.predicted_settings(p.release, p.argv, p.env) for k, p in plans.items()}


# -- the release table's prediction, every release --------------------------------------


@pytest.mark.parametrize("version", list(releases.BY_VERSION))
@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_predicted_every_preset_pair_differs_only_in_speculation(version, cpu, models):
    plans = {p: _plan(p, models, version, cpu) for p in _presets_for(version)}
    for a, b in itertools.combinations(plans, 2):
        pair = _predicted({a: plans[a], b: plans[b]})
        verdict = fairness.judge(pair, plans[a].release)  # raises on a difference
        assert verdict.fair and pair[a].source == "predicted"
        # on CPU the overlay pins the overlap scheduler for every arm (and its
        # max-total-tokens the KV pool, whatever the memory fraction)
        if cpu:
            assert {d.field for d in verdict.inherent} <= {"mem_fraction_static"}


@pytest.mark.parametrize("version", list(releases.BY_VERSION))
def test_predicted_catches_what_the_presets_pin(version, models, tmp_path):
    plans = {p: _plan(p, models, version, False, tmp_path) for p in ("baseline", "eagle3-3step")}
    with pytest.raises(UserError) as e:
        fairness.judge(_predicted(plans), plans["baseline"].release)
    text = str(e.value)
    assert "--allow-unequal" in text and "predicted" in text
    verdict = fairness.judge(_predicted(plans), plans["baseline"].release, allow_unequal=True)
    unequal = verdict.record()["unequal"]
    assert unequal["max_running_requests"] == {"baseline": None, "eagle3-3step": 48}
    assert set(unequal["random_seed"].values()) == {releases.RANDOM}
    flags = {d.field: d.flag for d in verdict.unequal}
    assert flags["max_running_requests"] == "max-running-requests"
    assert flags["random_seed"] == "random-seed"
    # the first difference, named with the flag that pins it, in this release's spelling
    first = verdict.unequal[0]
    assert first.field in text and f"--{first.flag}" in text


def test_preset_graph_sizes_are_sglangs_speculative_list():
    """baseline.toml pins SGLang's speculative decode graph list up to cuda-graph-max-bs."""
    server = presets.load(name="baseline").server
    assert server["cuda-graph-bs"] == fairness.decode_graph_sizes(
        server["cuda-graph-max-bs"], speculative=True
    )
    assert server["max-running-requests"] == server["cuda-graph-max-bs"]


def test_list_values_render_as_several_tokens(models):
    plan = _plan("eagle3-3step", models, "0.5.23", False)
    argv = list(plan.argv)
    i = argv.index("--cuda-graph-bs-decode")
    assert argv[i + 1 : i + 4] == ["1", "2", "3"] and argv[i + 35] == "128"
    old = _plan("eagle3-3step", models, "0.5.10.post1", False)
    assert "--cuda-graph-bs" in list(old.argv)


def test_speculative_settings_are_defined_once():
    assert fairness.is_speculative("speculative_num_steps")
    assert fairness.is_speculative("_speculative_draft_quantization_explicitly_set")
    assert fairness.is_speculative("enable_multi_layer_eagle")
    assert not fairness.is_speculative("max_running_requests")
    assert not fairness.is_speculative("cuda_graph_config.decode.bs")


# -- SGLang's own resolution on the harness releases -----------------------------------


@functools.cache
def _cases(version: str, root: str) -> tuple[list, list]:
    """(labels, plans) of every case one release resolves: each preset on a GPU as
    shipped, under the CPU overlay, and the unpinned baseline / eagle3-3step pair."""
    models = {"target": f"{root}/target", "draft": f"{root}/draft"}
    labels, plans = [], []
    for cpu in (False, True):
        for p in _presets_for(version):
            labels.append(("cpu" if cpu else "gpu", p))
            plans.append(_plan(p, models, version, cpu))
    unpinned = Path(root) / "unpinned"
    unpinned.mkdir(exist_ok=True)
    for p in ("baseline", "eagle3-3step"):
        labels.append(("unpinned", p))
        plans.append(_plan(p, models, version, False, unpinned))
    return labels, plans


def _launch(plan) -> ask_sglang.Launch:
    """The arm's launch as the fairness check asks it: its final arguments, the server's
    environment (the plan's on top of this one's)."""
    return ask_sglang.Launch(list(plan.argv), {**os.environ, **plan.env})


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """A fresh probe cache for the module, and every probe subprocess counted."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EAGLE_EXT_CACHE", str(tmp_path_factory.mktemp("probe-cache")))
    mp.delenv(probe_cache.BYPASS, raising=False)
    runs = []
    real = ask_sglang._probe
    mp.setattr(ask_sglang, "_probe", lambda *a: runs.append(a[1]) or real(*a))
    yield runs
    mp.undo()


@pytest.fixture(scope="module", params=list(HARNESS))
def sglang_answers(request, models, probes):
    """Every case of one release asked of its SGLang at once (the preflight's probe):
    one subprocess for the launches on a GPU as shipped, one for the CPU overlay's (its
    SGLang variables and stand-in start the process differently)."""
    version = request.param
    python = HARNESS[version] / "bin" / "python"
    labels, plans = _cases(version, str(Path(models["target"]).parent))
    before = len(probes)
    answers = ask_sglang.ask_launches(str(python), [_launch(p) for p in plans])
    assert len(probes) - before == 2, "one probe per start environment: GPU and CPU"
    resolved = []
    for (form, p), (a, why) in zip(labels, answers, strict=True):
        assert a is not None and a.settings is not None, f"{version} {form} {p}: {why}"
        r = a.settings
        assert r.error is None, f"{version} {form} {p}: {r.error}"
        assert r.version == version and r.source == "sglang" and not r.cached_at
        resolved.append(r)
    return version, dict(zip(labels, zip(plans, resolved, strict=True), strict=True))


@pytest.mark.harness
def test_sglang_every_preset_pair_differs_only_in_speculation(sglang_answers):
    version, answers = sglang_answers
    release = releases.BY_VERSION[version]
    for form in ("gpu", "cpu"):
        arms = {p: r for (f, p), (_, r) in answers.items() if f == form}
        for a, b in itertools.combinations(arms, 2):
            verdict = fairness.judge({a: arms[a], b: arms[b]}, release)
            assert verdict.fair, verdict.lines()
            print(version, form, a, b, verdict.lines())
            if form == "cpu":  # the overlay runs every arm on the same scheduler loop;
                # its max-total-tokens sizes the KV pool whatever the memory fraction
                assert {d.field for d in verdict.inherent} <= {"mem_fraction_static"}


@pytest.mark.harness
def test_sglang_catches_the_unpinned_presets(sglang_answers):
    """What the pins are for: left to SGLang, the arms differ (the 48 cap, the seed, the
    decode graph sizes), and the check stops naming the setting and its flag."""
    version, answers = sglang_answers
    arms = {p: r for (f, p), (_, r) in answers.items() if f == "unpinned"}
    release = releases.BY_VERSION[version]
    with pytest.raises(UserError, match="--allow-unequal"):
        fairness.judge(arms, release)
    verdict = fairness.judge(arms, release, allow_unequal=True)
    unequal = verdict.record()["unequal"]
    assert unequal["max_running_requests"] == {"baseline": None, "eagle3-3step": 48}
    assert len(set(unequal["random_seed"].values())) == 2
    graphs = "cuda_graph_bs" if version == "0.5.10.post1" else "cuda_graph_config.decode.bs"
    assert graphs in unequal
    assert {d.field: d.flag for d in verdict.unequal}["max_running_requests"] == (
        "max-running-requests"
    )


@pytest.mark.harness
def test_prediction_agrees_with_sglang(sglang_answers):
    """Every field the release table predicts has SGLang's own value (a random seed is
    some integer), for every case of this release."""
    version, answers = sglang_answers
    checked = 0
    for (form, p), (plan, theirs) in answers.items():
        ours = fairness.predicted_settings(plan.release, plan.argv, plan.env)
        for rule in releases.RESOLUTION_RULES[version]:
            if rule.field not in ours.fields:
                continue
            want, got = ours.fields[rule.field], theirs.fields.get(rule.field)
            if want == releases.GPU_MEMORY:
                assert isinstance(got, float), (form, p, rule.field, got)
            elif want == releases.RANDOM:
                assert isinstance(got, int), (form, p, rule.field, got)
            else:
                assert got == want, (form, p, rule.field, got, want)
            checked += 1
        for change in ours.changes:  # what the table says SGLang sets, SGLang set
            assert change.field in theirs.fields, (form, p, change)
    assert checked >= len(answers) * 2


@pytest.mark.harness
def test_the_fairness_check_asks_sglang_once_for_every_arm(sglang_answers, models, probes):
    """Each arm's answer from the batch above is cached under its own launch: asked alone,
    it is read back. Asked afresh, a three-arm comparison (on 0.5.23 the adaptive arm's
    environment differs: its backoff variable) starts one probe subprocess for the
    three, and SGLang answers each arm as it did among the other cases."""
    version, answers = sglang_answers
    python = str(HARNESS[version] / "bin" / "python")
    arms = ["baseline", "eagle3-3step", _presets_for(version)[-1]]
    plans = {a: _plan(a, models, version, False) for a in arms}
    if version == "0.5.23":
        assert plans["eagle3-adaptive"].env != plans["baseline"].env
    for plan in plans.values():
        alone, why = ask_sglang.ask_launch(python, _launch(plan).argv, _launch(plan).env)
        assert alone is not None and alone.cached_at, why
    mp = pytest.MonkeyPatch()
    mp.setenv(probe_cache.BYPASS, "0")  # asked afresh, as on a first comparison
    try:
        before = len(probes)
        notes: list[str] = []
        resolved = fairness.resolve_arms(plans, python, notes)
    finally:
        mp.undo()
    assert len(probes) - before == 1 and len(probes[-1]["launches"]) == 3
    # without a GPU here, SGLang resolves every arm as on the described host (hosts.py)
    host = hosts.for_launch(plans["baseline"].argv, _launch(plans["baseline"]).env)
    on = f" as on {ask_sglang.host_label(json.loads(host.probe_description()))}" if host else ""
    assert not notes and {r.label for r in resolved.values()} == {f"by SGLang {version}{on}"}
    for arm, r in resolved.items():
        assert r.fields == answers[("gpu", arm)][1].fields, arm
    assert fairness.judge(resolved, plans["baseline"].release).fair


# -- bench ab / compare: checked before any server starts ------------------------------


def _unpinned_preset(tmp_path: Path, text: str = UNPINNED) -> Path:
    path = tmp_path / "unpinned-eagle3-3step.toml"
    path.write_text(f'extends = "eagle3-3step"\n[server]\n{text}')
    return path


def test_bench_ab_stops_unequal_arms_before_any_server(models, tmp_path, capsys, monkeypatch):
    """The arms resolve differently (predicted for 0.5.21: no subprocess): one message
    naming the setting and the flag that pins it, exit 2, no launcher started."""
    from sgl_eagle_ext.tools.bench import arms, cli

    started = []
    monkeypatch.setattr(arms, "LauncherProcess", lambda plan: started.append(plan))
    unpinned = _unpinned_preset(tmp_path, "max-running-requests = false\n")
    argv = ["ab", "--preset-a", "baseline", "--preset-b", str(unpinned)]
    argv += ["--model-path", models["target"], "--draft-model-path", models["draft"]]
    argv += ["--sglang-version", "0.5.21", "--results", str(tmp_path / "r.jsonl")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "arms are not comparable: max_running_requests differs between arms (baseline 128, "
        "unpinned-eagle3-3step 48): pin it with --max-running-requests for every arm; "
        "resolved predicted from the release table for SGLang 0.5.21." in err
    )
    assert "--allow-unequal" in err and "Traceback" not in err
    assert started == [] and not (tmp_path / "r.jsonl").exists()


def test_bench_ab_stops_arms_whose_environment_differs(models, tmp_path, capsys, monkeypatch):
    """Settings alike, environments not: an NCCL variable set for one arm only (the seeds'
    62.9 -> 88.8 tok/s came from NCCL variables alone) stops the run like a setting,
    named with its values, before any server starts."""
    from sgl_eagle_ext.tools.bench import arms, cli

    started = []
    monkeypatch.setattr(arms, "LauncherProcess", lambda plan: started.append(plan))
    path = tmp_path / "simple.toml"
    path.write_text('extends = "eagle3-3step"\n[env]\nNCCL_PROTO = "Simple"\n')
    argv = ["ab", "--preset-a", "baseline", "--preset-b", str(path)]
    argv += ["--model-path", models["target"], "--draft-model-path", models["draft"]]
    argv += ["--sglang-version", "0.5.21", "--results", str(tmp_path / "r.jsonl")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "arms are not comparable: env NCCL_PROTO differs between arms (baseline LL, "
        "simple Simple): pin it in every arm's preset [env]" in err
    ), err
    assert "give NCCL_PROTO one value in every arm's preset [env]" in err
    assert "Traceback" not in err and started == [] and not (tmp_path / "r.jsonl").exists()


def test_bench_ab_checks_the_model_folders_once_before_any_arm(tmp_path, capsys, monkeypatch):
    """A missing model folder is one error before the first arm starts, not one per arm
    after each has started."""
    from sgl_eagle_ext.tools.bench import arms, cli

    started = []
    monkeypatch.setattr(arms, "LauncherProcess", lambda plan: started.append(plan))
    argv = ["ab", "--preset-b", "eagle3-3step", "--cpu", "--model-path", str(tmp_path / "m")]
    argv += ["--draft-model-path", str(tmp_path / "m"), "--sglang-version", "0.5.21"]
    assert cli.main([*argv, "--results", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("no such directory") == 1 and started == [], err


def test_environment_differences_speculative_secret_and_inherent(models):
    """What an arm's environment may differ in: our speculative switches and SGLang's
    speculative variables pass; anything else is unequal (recorded with --allow-unequal,
    a secret's value never shown); a caller's inherent difference is a note."""
    plans = {p: _plan(p, models, "0.5.23", False) for p in ("baseline", "eagle3-3step")}
    pred = _predicted(plans)
    base = dict(plans["baseline"].env)
    spec = {
        **base,
        "EAGLE_EXT_DRAFT_CATCHUP": "8",
        "EAGLE_EXT_CHAIN_VERIFY": "0",
        "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "1",
    }
    envs = {"baseline": base, "eagle3-3step": spec}
    assert fairness.judge(pred, plans["baseline"].release, envs=envs).fair
    envs["eagle3-3step"] = {**spec, "OMP_NUM_THREADS": "4", "HF_TOKEN": "hf_notshown12345"}
    with pytest.raises(UserError) as e:
        fairness.judge(pred, plans["baseline"].release, envs=envs)
    assert "env HF_TOKEN differs" in str(e.value) and "(and 1 more)" in str(e.value)
    verdict = fairness.judge(pred, plans["baseline"].release, True, envs)
    record = verdict.record()["unequal"]
    assert record["env OMP_NUM_THREADS"] == {"baseline": None, "eagle3-3step": "4"}
    assert record["env HF_TOKEN"] == {"baseline": None, "eagle3-3step": "***"}
    assert "hf_notshown12345" not in "\n".join(verdict.lines())
    why = {"OMP_NUM_THREADS": "set for the test", "HF_TOKEN": "set for the test"}
    noted = fairness.judge(pred, plans["baseline"].release, envs=envs, inherent_env=why)
    assert noted.fair and {d.field for d in noted.inherent} == {
        "env OMP_NUM_THREADS",
        "env HF_TOKEN",
    }


def test_allow_unequal_records_the_differences_beside_every_figure(
    models, tmp_path, capsys, monkeypatch
):
    """--allow-unequal: the run goes on (fake servers stand in for the launchers) and
    every sweep record and the summary carry what differed."""
    from fakes.fake_sglang import Background, FakeSGLang

    from sgl_eagle_ext.tools.bench import arms, cli

    servers = {}
    real_plan = arms.plan_arm

    def plan_arm(label, preset, **kw):
        plan = real_plan(label, preset, **kw)
        servers[plan.preset] = Background(FakeSGLang(delay_ms=1)).__enter__()
        return plan

    class Launched:
        def __init__(self, plan):
            self.plan, self.stopped_cleanly, self.tls = plan, True, None

        def wait_ready(self, timeout):
            return servers[self.plan.preset].url

        def stop(self):
            return 0

    monkeypatch.setattr(arms, "plan_arm", plan_arm)
    monkeypatch.setattr(arms, "LauncherProcess", Launched)
    res = tmp_path / "r.jsonl"
    argv = ["compare", "--arm", "baseline", "--arm", str(_unpinned_preset(tmp_path))]
    argv += ["--model-path", models["target"], "--draft-model-path", models["draft"]]
    argv += ["--sglang-version", "0.5.21", "--allow-unequal", "--concurrency", "1"]
    argv += ["--num-prompts", "2", "--prompts-per-concurrency", "0", "--max-tokens", "4"]
    argv += ["--warmup", "0", "--lossless-prompts", "0", "--results", str(res)]
    argv += ["--log-dir", str(tmp_path / "logs")]
    try:
        assert cli.main(argv) == 0
    finally:
        for bg in servers.values():
            bg.stop()
    out = capsys.readouterr().out
    assert "UNEQUAL ARMS (--allow-unequal): max_running_requests differs" in out
    recs = [json.loads(x) for x in res.read_text().splitlines()]
    assert [r["kind"] for r in recs] == ["sweep", "sweep", "compare"]
    for r in recs:
        assert r["arms_equal"] is False
        unequal = r["arm_settings"]["unequal"]
        assert unequal["max_running_requests"] == {
            "baseline": 128,
            "unpinned-eagle3-3step": 48,
        }
        assert "random_seed" in unequal and r["arm_settings"]["allow_unequal"] is True
