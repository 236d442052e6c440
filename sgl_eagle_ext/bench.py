"""`python -m sgl_eagle_ext.bench`: benchmarks (sgl_eagle_ext/tools/bench/cli.py)."""

from sgl_eagle_ext.tools.bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
