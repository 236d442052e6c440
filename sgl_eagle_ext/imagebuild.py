"""`python -m sgl_eagle_ext.imagebuild`: the Docker build's gate (sgl_eagle_ext/tools/imagebuild.py)."""

from sgl_eagle_ext.tools.imagebuild import main

if __name__ == "__main__":
    raise SystemExit(main())
