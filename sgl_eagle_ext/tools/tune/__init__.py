"""python -m sgl_eagle_ext.tune: the adaptive table (and the fixed presets) measured on this host."""
