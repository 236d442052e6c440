"""`python -m sgl_eagle_ext.tune`: adaptive table and fixed-preset ranking (tools/tune/cli.py)."""

from sgl_eagle_ext.tools.tune.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
