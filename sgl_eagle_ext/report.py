"""`python -m sgl_eagle_ext.report`: profile logs -> tables (sgl_eagle_ext/profiling/report.py)."""

from sgl_eagle_ext.profiling.report import main

if __name__ == "__main__":
    raise SystemExit(main())
