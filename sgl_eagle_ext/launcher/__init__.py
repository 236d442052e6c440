"""Runs in the launcher process (`python -m sgl_eagle_ext.launch`): presets,
preflight, the server child process, readiness, the NCCL table, the demo."""
