"""Preflight: catch, in seconds and before any weight loads, the launch mistakes that
cost hours (context-length mismatch, wrong aux layers, shape mismatches, busy GPUs).

    from sgl_eagle_ext.launcher import preflight
    report = preflight.run(target_dir, draft_dir, release, server_args, fix=False, skip=())
    report.ok / report.errors / report.render() / report.to_json() / report.retarget(args)

CLI: python -m sgl_eagle_ext.preflight --help
"""

from sgl_eagle_ext.launcher.preflight.findings import ERROR, INFO, WARNING, Finding, Report
from sgl_eagle_ext.launcher.preflight.runner import run

__all__ = ["run", "Report", "Finding", "ERROR", "WARNING", "INFO"]
