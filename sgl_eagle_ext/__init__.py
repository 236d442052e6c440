"""sgl-eagle-ext: a patched SGLang distribution for EAGLE-3 speculative decoding."""

__version__ = "0.1.0"
