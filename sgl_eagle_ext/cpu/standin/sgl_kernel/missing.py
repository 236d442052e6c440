"""Placeholders for sgl_kernel names the stand-in does not implement."""

from __future__ import annotations

import functools
import logging

logger = logging.getLogger("sgl_eagle_ext.cpu.standin")


@functools.cache
def missing_op(qualname: str):
    """A callable that raises: importing the name works, using it fails loudly."""
    logger.warning("sgl_kernel stand-in: %s was imported but is not implemented", qualname)

    def op(*args, **kwargs):
        raise NotImplementedError(
            f"{qualname} is not implemented by the CPU harness's sgl_kernel stand-in "
            "(sgl_eagle_ext/cpu/standin/sgl_kernel)"
        )

    op.__name__ = op.__qualname__ = qualname.rsplit(".", 1)[-1]
    return op
