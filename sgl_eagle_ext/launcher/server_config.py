"""SGLang's own `--config FILE.yaml` (after `--`), read by the launcher like any other
source of arguments: SGLang's parser turns the file into flags (its config merger, in
the python that will run the server, asked through the probe: ask_sglang.config_argv), and those flags take the place of `--config F`
in the launch, before the file's options given on the command line (SGLang's order:
command line over file). Its secrets (api-key, admin-api-key, ...) are then taken like
`-- --api-key K`: masked everywhere, carried in the environment. Left to SGLang, the
file's keys went into its ServerArgs dump, the server log and the launcher's echo."""

from __future__ import annotations

import os
import sys

from sgl_eagle_ext.common import safe_files
from sgl_eagle_ext.common.errors import UserError

FLAG = "--config"

_ASKED: dict[tuple, list[str]] = {}


def expand(args: list[str], python: str = sys.executable) -> list[str]:
    """`args` with `--config F` replaced by the flags SGLang reads from F (first: the
    command line's own flags win); `args` itself when it has none."""
    for tok in args:
        name, eq, value = tok.partition("=")
        # `--config=F` and abbreviations (`--conf F`, which argparse takes for --config):
        # SGLang merges the file only for the exact `--config`, else ignores it silently
        if (name == FLAG and eq) or (len(name) > 2 and name != FLAG and FLAG.startswith(name)):
            fix = value or "FILE"
            raise UserError(
                f"-- {tok}: SGLang reads its config file only from `--config FILE`.",
                fix=f"write -- --config {fix}",
            )
    at = [i for i, tok in enumerate(args) if tok == FLAG]
    if not at:
        return list(args)
    asked = [t for i in at for t in args[i : i + 2]]  # every --config and its file
    for i in at:  # a FIFO would hang SGLang's reader, a missing file cost its import
        if i + 1 < len(args):
            safe_files.read_bytes("-- --config", args[i + 1])
    shown = " ".join(asked)
    key = (python, os.getcwd(), tuple(asked), tuple(_stamp(args[i + 1 : i + 2]) for i in at))
    if key not in _ASKED:
        _ASKED[key] = _ask(python, asked, shown)
    rest = [t for i, t in enumerate(args) if not any(j <= i <= j + 1 for j in at)]
    return [*_ASKED[key], *rest]


def _stamp(path: list[str]):
    try:
        st = os.stat(path[0])
        return st.st_mtime_ns, st.st_size
    except (OSError, IndexError, ValueError):
        return None


def _ask(python: str, asked: list[str], shown: str) -> list[str]:
    """SGLang's own merge of the file (its prepare_server_args, through the probe)."""
    from sgl_eagle_ext.launcher.preflight import ask_sglang

    argv, why = ask_sglang.config_argv(python, asked)
    if argv is not None:
        return argv
    raise UserError(
        f"-- {shown}: SGLang refuses it: {why[:300]}.",
        fix="pass the file's options after -- instead",
    )
