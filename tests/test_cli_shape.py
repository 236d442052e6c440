"""One CLI shape: `tune` shows its commands (live, logs) in --help with the earlier
spellings kept, and every `python -m sgl_eagle_ext.X` entry is also a console script
(pyproject [project.scripts]) calling the same main."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sgl_eagle_ext.tools.tune import cli as tune
from sgl_eagle_ext.tools.tune.live_options import LiveOptions

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = sorted(p.stem for p in (ROOT / "sgl_eagle_ext").glob("*.py") if p.stem != "__init__")


def scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_entry_is_a_console_script_with_the_same_main():
    declared = scripts()
    assert sorted(declared) == [f"sgl-eagle-{e}" for e in sorted(ENTRIES)]
    for name in ENTRIES:
        # what the installed script runs: the entry point's object, loaded as pip's
        # wrapper loads it
        ep = importlib.metadata.EntryPoint(
            f"sgl-eagle-{name}", declared[f"sgl-eagle-{name}"], "console_scripts"
        )
        entry = importlib.import_module(f"sgl_eagle_ext.{name}")
        assert ep.load() is entry.main, name


def test_the_tune_script_answers_as_python_m_does():
    """pip's console-script wrapper: sys.argv[0] is the script, sys.exit(main())."""
    wrapper = (
        "import sys\nfrom sgl_eagle_ext.tune import main\n"
        "sys.argv = ['sgl-eagle-tune', '--help']\nsys.exit(main())\n"
    )
    by_script = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True)
    by_module = subprocess.run(
        [sys.executable, "-m", "sgl_eagle_ext.tune", "--help"], capture_output=True, text=True
    )
    assert by_script.returncode == by_module.returncode == 0
    assert by_script.stdout == by_module.stdout
    out = by_module.stdout
    assert "{live,logs}" in out
    for name, text in tune.COMMANDS.items():
        assert name in out and text.split()[0] in out
    assert "tune --live ..." in out  # the earlier spellings are named


@pytest.fixture
def dispatched(monkeypatch):
    calls = []
    monkeypatch.setattr(tune, "live_command", lambda argv: calls.append(("live", argv)) or 0)
    monkeypatch.setattr(tune, "offline", lambda argv: calls.append(("logs", argv)) or 0)
    return calls


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["live", "--model-path", "M", "--", "--tp", "8"],
            ("live", ["--model-path", "M", "--", "--tp", "8"]),
        ),
        (["--live", "--model-path", "M"], ("live", ["--model-path", "M"])),  # earlier spelling
        (
            ["--model-path", "M", "--live", "--", "--live"],
            ("live", ["--model-path", "M", "--", "--live"]),
        ),
        (["logs", "a.log", "--grid"], ("logs", ["a.log", "--grid"])),
        (["a.log", "--grid"], ("logs", ["a.log", "--grid"])),  # earlier spelling
        (["logs", "live"], ("logs", ["live"])),  # a log file named `live`
        (["a.log", "--", "--live"], ("logs", ["a.log", "--", "--live"])),  # SGLang's, not ours
    ],
)
def test_new_and_earlier_spellings_reach_the_same_command(dispatched, argv, expected):
    assert tune.main(argv) == 0
    assert dispatched == [expected]


def test_tune_live_runs_on_typed_options_mapped_at_the_command_line(monkeypatch):
    """`tune live`'s namespace stops at the command line: the run gets LiveOptions (every
    flag in its field, the parser's defaults the class's own) and the SGLang arguments."""
    from sgl_eagle_ext.tools.tune import live

    runs = []
    monkeypatch.setattr(live, "run", lambda opts, extra: runs.append((opts, extra)) or 0)
    assert tune.main(["live", "--model-path", "M", "--draft-model-path", "D", "--", "-x"]) == 0
    assert runs == [(LiveOptions(model_path="M", draft_model_path="D"), ["-x"])]
    every = {
        "--preset-file": "p.toml",
        "--levels": "1,2",
        "--max-steps": "3",
        "--steps": "0,3",
        "--budget-minutes": "9.5",
        "--results": "r/x.jsonl",
        "--max-tokens": "7",
        "--warmup-tokens": "2",
        "--request-cycles": "40",
        "--max-rounds": "3",
        "--validation-rounds": "4",
        "--prompts": "chat",
        "--seed": "5",
        "--sglang-version": "0.5.23",
        "--startup-timeout": "60",
    }
    switches = ["--baseline-arm", "--also-trees", "--allow-unequal", "--cpu", "--force"]
    argv = ["--model-path", "M", "--draft-model-path", "D", *sum(every.items(), ()), *switches]
    argv += ["--overlay", "o1", "--overlay", "o2"]  # bench compare's launcher flags, shared
    opts, extra = tune.live_options(argv)
    assert extra == []
    assert opts == LiveOptions(
        model_path="M",
        draft_model_path="D",
        preset_file=Path("p.toml"),
        levels="1,2",
        max_steps=3,
        steps="0,3",
        budget_minutes=9.5,
        results=Path("r/x.jsonl"),
        baseline_arm=True,
        also_trees=True,
        allow_unequal=True,
        max_tokens=7,
        warmup_tokens=2,
        request_cycles=40,
        max_rounds=3,
        validation_rounds=4,
        prompts="chat",
        seed=5,
        cpu=True,
        sglang_version="0.5.23",
        force=True,
        startup_timeout=60.0,
        overlays=("o1", "o2"),
    )


def test_each_command_has_its_own_help(capsys):
    for name, prog in (("live", "tune live"), ("logs", "tune logs")):
        with pytest.raises(SystemExit) as e:
            tune.main([name, "--help"])
        assert e.value.code == 0
        assert f"usage: python -m sgl_eagle_ext.{prog} " in capsys.readouterr().out


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        tune.main([])
    assert e.value.code == 2
    assert "a command is needed: live or logs" in capsys.readouterr().err
