"""Tensor names and shapes of a checkpoint from its safetensors headers (never the data).

A safetensors file starts with an 8-byte little-endian header length and a JSON
header {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

MAX_HEADER = 100 * 2**20  # a real header is a few MB at most


def shapes(model_dir: Path) -> tuple[dict[str, list[int]], str | None]:
    """({tensor name: shape} over all shards, None) or ({}, why they could not be read)."""
    model_dir = Path(model_dir)
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        other = [p.name for p in model_dir.glob("*.bin")] + [p.name for p in model_dir.glob("*.pt")]
        return {}, (
            "weights are not in safetensors format (" + ", ".join(other[:3]) + ")"
            if other
            else "no *.safetensors file"
        )
    out: dict[str, list[int]] = {}
    for f in files:
        header, why = _header(f)
        if header is None:
            return {}, why
        for name, info in header.items():
            shape = info.get("shape") if isinstance(info, dict) else None
            if (
                name != "__metadata__"
                and isinstance(shape, list)
                and all(type(d) is int for d in shape)
            ):
                out[name] = shape
    return out, None


def _header(f: Path) -> tuple[dict | None, str | None]:
    """One shard's safetensors header (its JSON object; no tensor data read), or (None,
    why it could not be read)."""
    try:
        with open(f, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if not 2 <= size <= MAX_HEADER:
                return None, f"{f.name}: header length {size} is not plausible"
            header = json.loads(fh.read(size))
    except (OSError, struct.error, ValueError, RecursionError) as e:
        return None, f"{f.name}: unreadable safetensors header ({e})"
    if not isinstance(header, dict):
        return None, f"{f.name}: the safetensors header is not a JSON object"
    return header, None


def find(tensors: dict[str, list[int]], suffix: str) -> tuple[str, list[int]] | None:
    """The tensor named `suffix` or ending in '.' + suffix (checkpoints may prefix 'model.')."""
    for name, shape in tensors.items():
        if name == suffix or name.endswith("." + suffix):
            return name, shape
    return None


def byte_sizes(model_dir: Path) -> tuple[dict[str, int], str | None]:
    """({tensor name: bytes} over all shards, from the headers' data_offsets) or
    ({}, why they could not be read). Reads the headers only."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return {}, "no *.safetensors file"
    out: dict[str, int] = {}
    for f in files:
        header, why = _header(f)
        if header is None:
            return {}, why
        for name, info in header.items():
            offsets = info.get("data_offsets") if isinstance(info, dict) else None
            if (
                name != "__metadata__"
                and isinstance(offsets, list)
                and len(offsets) == 2
                and all(type(d) is int for d in offsets)
            ):
                out[name] = max(0, offsets[1] - offsets[0])
    return out, None
