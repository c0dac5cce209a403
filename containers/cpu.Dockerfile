# syntax=docker/dockerfile:1
# ddpbench CPU image: Debian bookworm's Python 3.11 + exactly the versions in uv.lock.
#
# Build (from the repository root; the context is filtered by .dockerignore):
#   docker build -f containers/cpu.Dockerfile -t ddpbench-cpu:0.1.0 .
#   podman build -f containers/cpu.Dockerfile -t ddpbench-cpu:0.1.0 .
# Without any registry (as on the project's CI machines) `bash containers/build.sh`
# debootstraps bookworm, imports it as localhost/ddpbench-base:bookworm and passes it
# as BASE_IMAGE; the two bases are the same distribution release.
#
# torch comes from PyPI exactly as locked, i.e. the CUDA build with its nvidia-* wheels
# (about 5 GB): it runs on CPU, and a CPU-only wheel would be a different artifact from
# the one the lock, .venv and the CUDA image use. The size is the price of "same versions".
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
FROM ${BASE_IMAGE}

# Pinned tool versions (tests/unit/test_version_drift.py checks them against
# scripts/bootstrap.sh, envs/*.yaml and uv.lock).
ARG UV_VERSION=0.13.9
ARG PYTHON_VERSION=3.11
# Sites whose egress goes through a TLS-intercepting proxy mount their CA bundle for
# the build only and name it here (containers/build.sh does so with the host's bundle);
# it is used by pip and uv during the build and is not part of the image.
ARG BUILD_CA_BUNDLE=

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8
# bookworm's python3 is 3.11; python3-venv brings ensurepip for the uv bootstrap;
# procps gives `ps` to people debugging a cell; git lets sysinfo read the commit of a
# bind-mounted checkout.
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
# Dependencies first (the big, rarely changing layer), then the project itself.
# The uv cache is a build-time cache mount (buildkit/buildah keep it between builds);
# containers/build.sh instead mounts the host's ~/.cache/uv (-v) and points
# UV_CACHE_DIR at it, so the wheels .venv was built from are not downloaded again.
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
ARG IMAGE_NAME=ddpbench-cpu:0.1.0
ARG GIT_COMMIT=unknown
ENV PATH=/opt/ddpbench/.venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    DDPBENCH_CONTAINER_IMAGE=${IMAGE_NAME} \
    DDPBENCH_IMAGE_REVISION=${GIT_COMMIT}
LABEL org.opencontainers.image.title="ddpbench-cpu" \
      org.opencontainers.image.description="ddpbench: data-parallel training benchmarks (CPU, gloo)" \
      org.opencontainers.image.ref.name="${IMAGE_NAME}" \
      org.opencontainers.image.revision="${GIT_COMMIT}"
# Snakemake (--use-singularity) and `podman run` both run commands here with the
# results folder bind-mounted; nothing in the image needs to be writable.
WORKDIR /work
CMD ["python", "-m", "ddpbench", "launch", "--help"]
