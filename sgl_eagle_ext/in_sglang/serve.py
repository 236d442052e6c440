"""The server process: SGLang's own HTTP server, started with our scheduler entry.

The launcher runs `python -m sgl_eagle_ext.in_sglang.serve <sglang args>` instead of
`python -m sglang.launch_server`, so that `scheduler_entry.run_scheduler_process`
(module level, hence picklable under spawn) runs first in every scheduler process.
What runs in these processes is the in-process registry's (in_sglang/features.py).
"""

from __future__ import annotations

import os
import sys

from sgl_eagle_ext.common import releases, secret_flags


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --api-key, --admin-api-key, --ssl-keyfile-password: from the environment, never argv
    argv += secret_flags.argv_from_environment(os.environ)

    from sgl_eagle_ext.in_sglang import features

    features.run(features.SERVER)  # before SGLang is imported (the CPU harness)

    from sglang.srt.entrypoints import http_server
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    from sgl_eagle_ext.in_sglang.scheduler_entry import run_scheduler_process

    features.run(features.LAUNCH)  # SGLang imported (the profiler's flush before its kill)

    # What launch_server.py's __main__ and run_server do besides launching, per the
    # release table (the launcher refused an unsupported release, or --force chose
    # the rules of an older one).
    release, _ = releases.resolve(None, force=True)
    if release.plugin_entry_point:
        from sglang.srt.plugins import load_plugins

        load_plugins()

    server_args = prepare_server_args(argv)
    if release.resolve_once:
        server_args.resolve_once()
    try:
        http_server.launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
    finally:
        features.run(features.EXIT)  # schedulers still alive (the profiler's last windows)
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
