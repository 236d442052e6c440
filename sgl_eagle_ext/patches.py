"""`python -m sgl_eagle_ext.patches`: source patches (sgl_eagle_ext/tools/patches/cli.py)."""

from sgl_eagle_ext.tools.patches.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
