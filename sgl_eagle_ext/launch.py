"""`python -m sgl_eagle_ext.launch`: the launcher (sgl_eagle_ext/launcher/cli.py)."""

from sgl_eagle_ext.launcher.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
