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
from sgl_eagle_ext.tools.tune import live

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
    monkeypatch.setattr(live, "run", lambda argv: calls.append(("live", argv)) or 0)
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
