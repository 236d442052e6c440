"""`python -m sgl_eagle_ext.preflight`: preflight checks (sgl_eagle_ext/launcher/preflight/cli.py)."""

from sgl_eagle_ext.launcher.preflight.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
