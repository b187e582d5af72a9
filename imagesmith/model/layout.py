"""Where imagesmith puts things inside every image it builds (pure constants, importing nothing, so that the
plan, the layer writer and host-side scripts share one source of truth)."""

# Where a CUDA wheel set is unpacked (the shared CUDA layer, imagesmith.render.cudalayer); the plan records it per set.
CUDA_PREFIX = "/opt/imagesmith/cuda"
