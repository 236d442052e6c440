"""A bench flag is declared once: the options dataclass's field carries its flag
(common/declared_flags.py), so a new field alone is in --help, read (through its check) and
in the options the run gets; and every declared field of the shared groups is a flag of
the commands that use them."""

from __future__ import annotations

import dataclasses

import pytest

from sgl_eagle_ext.common.declared_flags import flag
from sgl_eagle_ext.tools.bench import cli, options, workload
from sgl_eagle_ext.tools.bench.commands import sweep as sweep_cmd
from sgl_eagle_ext.tools.bench.levels import above


def help_of(command: str) -> str:
    return cli.parser()._subparsers._group_actions[0].choices[command].format_help()


def test_a_new_field_reaches_help_its_check_and_the_run(monkeypatch, capsys):
    top_k = flag("--top-k", type=int, check=above(0), help="sample from the K likeliest tokens")
    New = dataclasses.make_dataclass(
        "RequestOptions",
        [("top_k", int | None, top_k)],
        bases=(options.RequestOptions,),
        frozen=True,
    )
    monkeypatch.setattr(options, "RequestOptions", New)  # the one edit a new flag needs
    seen = []
    monkeypatch.setattr(sweep_cmd, "run", lambda opts, extra, console: seen.append(opts) or 0)
    assert "--top-k TOP_K" in help_of("sweep") and "K likeliest" in help_of("single")
    assert cli.main(["sweep", "--top-k", "5", "--max-tokens", "7"]) == 0
    (opts,) = seen
    assert (opts.requests.top_k, opts.requests.max_tokens) == (5, 7)
    assert cli.main(["sweep"]) == 0 and seen[1].requests.top_k is None
    assert cli.main(["sweep", "--top-k", "0"]) == 2
    assert "--top-k 0: must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, groups",
    [
        ("sweep", (options.ConnectionOptions, options.RequestOptions, options.SweepOptions,
                   options.RecordOptions, options.ConsoleOptions, workload.WorkloadOptions)),
        ("compare", (options.RequestOptions, options.SweepOptions, workload.WorkloadOptions)),
        ("single", (options.RequestOptions, options.RecordOptions, options.ConsoleOptions)),
    ],
)  # fmt: skip
def test_every_declared_field_is_a_flag(command, groups):
    text = help_of(command)
    for cls in groups:
        for f in dataclasses.fields(cls):
            names = f.metadata.get("names", ())
            for name in names:
                assert name in text, (command, cls.__name__, name)


def test_command_defaults_and_opt_ins():
    """--max-tokens' default is each command's; --label/--run-id only where asked."""
    assert "(default 256)" in help_of("sweep") and "(default 512)" in help_of("single")
    assert "--label" in help_of("sweep") and "--label" not in help_of("compare")
