"""Shared foundations, imported by every side: the release table, user errors,
command-line helpers, the HTTP client. Nothing here imports SGLang."""
