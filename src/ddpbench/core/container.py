"""Which container image a run executes in: name:tag plus a content digest.

Every summary's ``env.container_image`` comes from :func:`image_identity`, so a result
row says exactly which image (if any) produced it. The parts come from:

* the name: ``DDPBENCH_CONTAINER_IMAGE`` — baked into both images by their Dockerfiles
  (``ENV DDPBENCH_CONTAINER_IMAGE=ddpbench-cpu:<version>``), or set by whoever runs one;
* the digest, first found of:
  1. ``DDPBENCH_CONTAINER_DIGEST`` (the runner knows it: ``containers/build.sh`` writes
     the image ID to ``containers/build/<name>.digest`` and passes it with ``-e``);
  2. podman's ``/run/.containerenv`` (``imageid=...``, filled in by podman run);
  3. the ``.sif`` file Apptainer/Singularity runs from (``APPTAINER_CONTAINER`` /
     ``SINGULARITY_CONTAINER``): its sha256, cached next to it (``<sif>.sha256``,
     keyed by size and mtime) so only the first run on a new image pays for hashing.

An image cannot hold its own digest (writing it would change it), hence the runtime
look-ups. Outside any container the identity is ``None``.

The digest recorded for OCI images is the image ID (``sha256:`` of the image config),
which docker and podman both show as IMAGE ID and which, unlike a manifest digest,
survives push/pull/save/load unchanged.
"""

from __future__ import annotations

import os
import pathlib
import re

from ddpbench.core import safe_io

ENV_NAME = "DDPBENCH_CONTAINER_IMAGE"
ENV_DIGEST = "DDPBENCH_CONTAINER_DIGEST"
CONTAINERENV = pathlib.Path("/run/.containerenv")
SIF_ENV_VARS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")

_HEX64 = re.compile(r"^(sha256:)?([0-9a-f]{64})$")


def _normalise(digest: str | None) -> str | None:
    if not digest:
        return None
    m = _HEX64.match(digest.strip())
    return f"sha256:{m.group(2)}" if m else None


def _containerenv() -> dict[str, str]:
    """podman's key="value" lines (empty unless podman filled them in)."""
    try:
        text = CONTAINERENV.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def sif_sha256(sif: str | os.PathLike) -> str | None:
    """sha256 of a .sif file, cached in ``<sif>.sha256`` (size, mtime, digest)."""
    path = pathlib.Path(sif)
    try:
        st = path.stat()
    except OSError:
        return None
    if not path.is_file():  # a sandbox directory has no single checksum
        return None
    key = f"{st.st_size} {st.st_mtime_ns}"
    cache = path.with_name(path.name + ".sha256")
    try:
        cached_key, _, digest = cache.read_text().strip().rpartition(" ")
        if cached_key == key and _normalise(digest):
            return _normalise(digest)
    except OSError:
        pass
    digest = f"sha256:{safe_io.sha256_file(path)}"
    try:  # an unpredictable temporary, never a planted link (safe_io)
        safe_io.atomic_write_text(cache, f"{key} {digest}\n")
    except OSError:
        pass  # read-only image folder: hash again next time
    return digest


def image_digest(environ: os._Environ | dict | None = None) -> str | None:
    env = os.environ if environ is None else environ
    digest = _normalise(env.get(ENV_DIGEST))
    if digest:
        return digest
    digest = _normalise(_containerenv().get("imageid"))
    if digest:
        return digest
    for var in SIF_ENV_VARS:
        if env.get(var):
            return sif_sha256(env[var])
    return None


def image_identity(environ: os._Environ | dict | None = None) -> str | None:
    """``name:tag@sha256:...`` of the running image, the parts known, or None.

    None means "not in a container" (no name, no digest found)."""
    env = os.environ if environ is None else environ
    name = env.get(ENV_NAME) or None
    if name is None:
        name = _containerenv().get("image") or None
    if name is None:
        for var in SIF_ENV_VARS:
            if env.get(var):
                name = os.path.basename(env[var].rstrip("/"))
                break
    digest = image_digest(env)
    if name and digest:
        return f"{name}@{digest}" if "@" not in name else name
    return name or digest
