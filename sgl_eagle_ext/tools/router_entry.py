"""`python -m sgl_eagle_ext.tools.router_entry <sglang_router args>`: SGLang's
router, with the workers' API key taken from the environment instead of the
command line (which every user of the host can read in ps and /proc)."""

from __future__ import annotations

import os
import sys

from sgl_eagle_ext.common.contract import API_KEY_ENV


def main() -> None:
    argv = sys.argv[1:]
    key = os.environ.pop(API_KEY_ENV, None)
    if key:
        argv += ["--api-key", key]
    from sglang_router.launch_router import launch_router, parse_router_args

    launch_router(parse_router_args(argv))


if __name__ == "__main__":
    main()
