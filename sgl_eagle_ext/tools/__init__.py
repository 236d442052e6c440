"""Stand-alone operator tools: benchmarks, source patches, the router wrapper,
the image health check and build gate, the pristine-wheel cache."""
