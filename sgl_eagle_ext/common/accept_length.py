"""The accept-length names, for the modules that import them from here: the functions
live in common/figures.py, the one home of the project's figures."""

from sgl_eagle_ext.common.figures import (  # noqa: F401
    BONUS,
    correct_drafts,
    decode_only,
    from_counts,
    from_histogram,
    of_meta,
    of_request,
    per_cycle,
    tokens_of_cycles,
)
