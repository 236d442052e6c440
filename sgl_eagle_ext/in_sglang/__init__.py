"""Runs inside SGLang's own processes (its HTTP server and every scheduler/TP
rank). A bug here takes down every rank: keep it small, import SGLang lazily,
never raise into SGLang, and never import from launcher/ or tools/."""
