# syntax=docker/dockerfile:1
# ddpbench CUDA image: an official nvidia/cuda base + Python 3.11 + exactly the versions
# in uv.lock (the same torch wheel as the CPU image: PyPI's CUDA build, which brings its
# own CUDA user-space libraries as nvidia-* wheels; the base supplies the driver-facing
# set-up: NVIDIA_* variables for the container toolkit and the CUDA forward-compat libs).
#
#   docker build -f containers/cuda.Dockerfile -t ddpbench-cuda:0.1.0 .
#   docker run --gpus all ddpbench-cuda:0.1.0 python -m ddpbench launch --nproc-per-node 2 ...
#   apptainer build ddpbench-cuda.sif docker-daemon://ddpbench-cuda:0.1.0
#   apptainer exec --nv ddpbench-cuda.sif python -m ddpbench launch ...
#
# Not built on the project's CI machines (no registry, no GPU); checked where a GPU
# machine with a registry is at hand (see the README's container section).
#
# Python 3.11, not Ubuntu 24.04's 3.12: the lock resolves numpy/scipy/contourpy/
# networkx differently for >= 3.12, so only 3.11 gives the same package set as the CPU
# image, .venv and envs/ddpbench.yaml. Ubuntu 22.04 ships python3.11 in its own archive.
ARG BASE_IMAGE=docker.io/nvidia/cuda:13.0.2-runtime-ubuntu22.04
FROM ${BASE_IMAGE}

# Pinned tool versions (tests/unit/test_version_drift.py checks them against
# scripts/bootstrap.sh, the CPU image, envs/*.yaml and uv.lock).
ARG UV_VERSION=0.13.9
ARG PYTHON_VERSION=3.11
# CA bundle mounted for the build only, for sites with a TLS-intercepting proxy.
ARG BUILD_CA_BUNDLE=

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python${PYTHON_VERSION} python${PYTHON_VERSION}-venv ca-certificates procps git \
 && rm -rf /var/lib/apt/lists/* \
 && python${PYTHON_VERSION} -m venv /opt/uv \
 && if [ -n "$BUILD_CA_BUNDLE" ]; then export PIP_CERT="$BUILD_CA_BUNDLE"; fi \
 && /opt/uv/bin/pip install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}" \
 && ln -s /opt/uv/bin/uv /usr/local/bin/uv \
 && uv --version

WORKDIR /opt/ddpbench
ENV UV_PROJECT_ENVIRONMENT=/opt/ddpbench/.venv \
    UV_PYTHON=/usr/bin/python${PYTHON_VERSION} \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1
ARG UV_CACHE_DIR=/root/.cache/uv
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    if [ -n "$BUILD_CA_BUNDLE" ]; then export SSL_CERT_FILE="$BUILD_CA_BUNDLE"; fi \
 && uv sync --locked --no-dev --no-install-project
# (README.md is the package's readme: only the project's own build needs it.)
COPY README.md ./
COPY src ./src
RUN --mount=type=cache,target=/root/.cache/uv \
    if [ -n "$BUILD_CA_BUNDLE" ]; then export SSL_CERT_FILE="$BUILD_CA_BUNDLE"; fi \
 && uv sync --locked --no-dev --no-editable

# Identity last, so a new commit or name only rebuilds these metadata layers.
# DDPBENCH_IMAGE_REVISION is the commit the image's own copy of ddpbench was built
# from; a run from a bind-mounted checkout (the workflow puts src/ on PYTHONPATH)
# reports that checkout's commit instead, read with the image's git.
ARG IMAGE_NAME=ddpbench-cuda:0.1.0
ARG GIT_COMMIT=unknown
ENV PATH=/opt/ddpbench/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    DDPBENCH_CONTAINER_IMAGE=${IMAGE_NAME} \
    DDPBENCH_IMAGE_REVISION=${GIT_COMMIT}
LABEL org.opencontainers.image.title="ddpbench-cuda" \
      org.opencontainers.image.description="ddpbench: data-parallel training benchmarks (CUDA, NCCL)" \
      org.opencontainers.image.ref.name="${IMAGE_NAME}" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
WORKDIR /work
CMD ["python", "-m", "ddpbench", "launch", "--help"]
