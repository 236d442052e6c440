"""`python -m sgl_eagle_ext.router`: SGLang's router in front of replicas (sgl_eagle_ext/tools/router.py)."""

from sgl_eagle_ext.tools.router import main

if __name__ == "__main__":
    raise SystemExit(main())
