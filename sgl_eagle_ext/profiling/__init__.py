"""EAGLE3_PROFILE: per-phase timing of SGLang's EAGLE worker.

phases.py   the phase table: which SGLang method opens and closes each phase
recorder/   runs inside SGLang's scheduler ranks (wrappers, clock, windows)
report.py   operator tool: server logs -> tables and break-even accept lengths
"""
