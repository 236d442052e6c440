# sgl-eagle-ext: SGLang with the EAGLE-3 launcher, presets, preflight and profiling,
# for 8x RTX PRO 6000 Blackwell (SM120, PCIe). docs/operators-guide.md: how to run it.
#
#   docker build -t sgl-eagle-ext:0.5.23 .
#   docker build --build-arg SGLANG_VERSION=0.5.21 -t sgl-eagle-ext:0.5.21 .
#
# tests/test_docker.py checks this file without a Docker engine: hadolint, the
# SGLang pin against sgl_eagle_ext/common/releases.py, every COPY source against
# .dockerignore, the entry point and health check modules.

# CUDA 13 *devel*, the cuDNN flavour SGLang's own images build on: SGLang
# compiles kernels at run time (the Marlin INT4 MoE kernel Kimi-K2.5 uses on
# SM120, its JIT kernels) and needs nvcc >= 12.9 for sm_120. Ubuntu 24.04:
# glibc 2.39 for SGLang's manylinux_2_34 wheels, and Python 3.12, for which
# every supported release ships a wheel (0.5.13.post1+ publish cp311/cp312/cp313
# builds; 0.5.10.post1 is pure Python, >= 3.10). The host needs an NVIDIA
# driver that supports CUDA 13.0 (580 or newer). SGLang 0.5.19 was the last
# release with a CUDA 12 lane: for an older release whose kernels want CUDA 12,
# BASE_IMAGE=nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04 with
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cu129 is the way out.
ARG BASE_IMAGE=nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04
FROM ${BASE_IMAGE}

# The SGLang release: one of the release table's (sgl_eagle_ext/common/releases.py,
# RELEASES); the default is its PRIMARY. tests/test_docker.py keeps both
# values equal to the table.
ARG SGLANG_VERSION=0.5.23
ARG SUPPORTED_SGLANG_VERSIONS="0.5.10.post1 0.5.13.post1 0.5.16 0.5.19 0.5.21 0.5.23"
# torch's CUDA 13.0 builds: SGLang's own requirement then resolves to a cu130
# torch for every release (PyPI's torch 2.9.1, pinned by 0.5.10.post1, is a
# CUDA 12 build).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ARG DEBIAN_FRONTEND=noninteractive

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Refuse an unsupported release before downloading gigabytes.
RUN case " ${SUPPORTED_SGLANG_VERSIONS} " in \
      *" ${SGLANG_VERSION} "*) echo "building for SGLang ${SGLANG_VERSION}" ;; \
      *) echo "SGLANG_VERSION=${SGLANG_VERSION} is not supported; use one of: ${SUPPORTED_SGLANG_VERSIONS}" >&2; exit 1 ;; \
    esac

# Python 3.12 with venv and headers, and a C toolchain: Triton builds a small C
# launcher per kernel against Python.h. GNU patch applies the source patches;
# pciutils gives the preflight its view of PCIe (ACS). Versions come from the
# Ubuntu 24.04 archive of the day: pinning them would break every rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential ca-certificates patch pciutils python3 python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*

# SGLang at the pinned release, in a virtual environment (Ubuntu 24.04's own
# Python refuses pip installs); torch, FlashInfer and sglang-kernel come at the
# versions its wheel pins (the imagebuild step below checks torch against the table).
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:${PATH}
RUN python3 -m venv "${VIRTUAL_ENV}" \
 && pip install --no-cache-dir --extra-index-url "${TORCH_INDEX_URL}" "sglang==${SGLANG_VERSION}"

# This project, from the build context (.dockerignore lets only these in), with
# its `router` extra: sglang-router for data-parallel replicas (its Rust binary
# ships in the wheel), pinned in pyproject.toml: hadolint cannot see that pin.
WORKDIR /opt/sgl-eagle-ext
COPY pyproject.toml ./
COPY sgl_eagle_ext/ ./sgl_eagle_ext/
COPY launch/ ./launch/
COPY patches/ ./patches/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[router]" \
 && rm -rf build ./*.egg-info

# Build-time gate: the release is a supported one and installed, torch is its
# pin, the patches the manifest marks for the image (docker = true) are applied
# and check as applied, the entry points import. Then the presets must load and
# the router's Rust extension must import.
WORKDIR /workspace
RUN python -m sgl_eagle_ext.imagebuild --sglang-version "${SGLANG_VERSION}" \
      --record /etc/sgl-eagle-ext/image.json \
 && python -m sgl_eagle_ext.launch --list-presets \
 && python -c "from sglang_router.router import Router"

# Caches on volumes: compiled kernels (SGLang's JIT incl. Marlin, Triton,
# FlashInfer) survive restarts, and Hugging Face downloads too. The launcher's
# logs go to /workspace/logs.
ENV HF_HOME=/root/.cache/huggingface \
    SGLANG_CACHE_DIR=/root/.cache/sglang \
    TRITON_CACHE_DIR=/root/.cache/triton \
    FLASHINFER_WORKSPACE_BASE=/root \
    PYTHONUNBUFFERED=1
VOLUME ["/root/.cache/sglang", "/root/.cache/triton", "/root/.cache/flashinfer", "/root/.cache/huggingface"]

EXPOSE 30000

# Healthy = GET /health_generate answers 200 (a real 1-token generation through
# every rank), the launcher's own readiness gate. Kimi-K2.5 takes many minutes
# to load, compile and capture CUDA graphs: failures in the first hour do not count.
HEALTHCHECK --interval=30s --timeout=45s --start-period=60m --retries=3 \
  CMD ["/opt/venv/bin/python", "-m", "sgl_eagle_ext.healthcheck", "--quiet", "--timeout", "40"]

ENTRYPOINT ["python", "-m", "sgl_eagle_ext.launch"]
CMD ["--list-presets"]
