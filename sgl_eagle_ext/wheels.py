"""`python -m sgl_eagle_ext.wheels`: pristine SGLang wheels (sgl_eagle_ext/common/wheels.py)."""

from sgl_eagle_ext.common.wheels import main

if __name__ == "__main__":
    raise SystemExit(main())
