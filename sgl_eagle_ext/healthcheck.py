"""`python -m sgl_eagle_ext.healthcheck`: the image's health check (sgl_eagle_ext/tools/healthcheck.py)."""

from sgl_eagle_ext.tools.healthcheck import main

if __name__ == "__main__":
    raise SystemExit(main())
