#!/usr/bin/env bash
# Build the ddpbench CPU image with no container registry reachable, then run one
# smoke cell inside it (world size 2, synthetic data, mlp, a few steps) and check that
# its summary is valid and names the image.
#
#   bash containers/build.sh              # base (once) + CPU image + smoke cell
#   bash containers/build.sh --no-smoke   # build only
#   bash containers/build.sh --smoke-only # smoke cell on the image already built
#   bash containers/build.sh --cuda       # the CUDA image too (needs docker.io reachable;
#                                         # its smoke cell runs on the GPU via podman CDI)
#   bash containers/build.sh --cuda-standin  # cuda.Dockerfile on the local bookworm base:
#                                         # checks all of it but the base, with no registry
#
# Steps: apt-get install podman/runc/debootstrap if missing; debootstrap Debian bookworm
# from the mirror the machine's apt sources name; `podman import` it as
# localhost/ddpbench-base:bookworm; `podman build` containers/cpu.Dockerfile on it
# (packages from Debian's mirror and PyPI only); write the image ID to
# containers/build/<image>.digest; run the smoke cell with containers/build/smoke-<image>
# bind-mounted at /out. Timings go to containers/build/timings.tsv.
#
# Settings for machines like the project's CI (VMs without systemd, cgroup v1, a
# TLS-intercepting egress proxy) live here, not in the README's main path:
# runc as the runtime, cgroupfs as cgroup manager, explicit ulimits (the defaults podman
# asks for exceed the VM's hard limits), host networking (no CNI bridge needed), the
# host's CA bundle mounted for the build only. Override with the variables below.
#
# debootstrap (as root) unpacks the base into a work folder: by default a fresh
# `mktemp -d` under /var/tmp, removed on exit (nothing in it is reused: the base image
# is the cache). DDPBENCH_CONTAINER_WORK names one instead; it must be a real directory
# owned by the user running this and writable by nobody else, in folders only root or
# that user can change (scripts/private_dir.sh), else the build is refused before
# anything runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/private_dir.sh
source "$ROOT/scripts/private_dir.sh"

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
CPU_NAME=${DDPBENCH_CPU_IMAGE:-ddpbench-cpu:$VERSION}
CUDA_NAME=${DDPBENCH_CUDA_IMAGE:-ddpbench-cuda:$VERSION}
STANDIN_NAME=ddpbench-cuda-standin:$VERSION
BASE_IMAGE=${DDPBENCH_BASE_IMAGE:-localhost/ddpbench-base:bookworm}
SUITE=bookworm
WORK=${DDPBENCH_CONTAINER_WORK:-}
OUT=$ROOT/containers/build
STORAGE_DRIVER=${DDPBENCH_PODMAN_STORAGE_DRIVER:-}   # e.g. vfs where overlay is unavailable
UV_CACHE_HOST=${UV_CACHE_DIR:-$HOME/.cache/uv}
CA_BUNDLE=${DDPBENCH_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

smoke=1 build=1 cuda=0 standin=0
for arg in "$@"; do
    case $arg in
        --no-smoke) smoke=0 ;;
        --smoke-only) build=0 ;;
        --cuda) cuda=1 ;;
        --cuda-standin) standin=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "build.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done

log() { printf '[containers] %s\n' "$*" >&2; }
if [ -n "$WORK" ]; then
    WORK=$(private_dir "$WORK" 0700 "work folder (DDPBENCH_CONTAINER_WORK)") || exit 1
else
    WORK=$(mktemp -d /var/tmp/ddpbench-containers.XXXXXXXX)
    trap 'rm -rf -- "$WORK"' EXIT
fi
mkdir -p "$OUT"
TIMINGS=$OUT/timings.tsv
t_start=$SECONDS
record() { printf '%s\t%s\t%d\n' "$(date -u +%FT%TZ)" "$1" "$2" >>"$TIMINGS"; log "$1: ${2}s"; }

# --- tools -------------------------------------------------------------------------
missing=()
for tool in podman runc debootstrap; do command -v $tool >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
    [ "$(id -u)" = 0 ] || { echo "build.sh: install ${missing[*]} (needs root)" >&2; exit 1; }
    log "installing ${missing[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 podman runc debootstrap >/dev/null
fi

PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
[ -n "$STORAGE_DRIVER" ] && PODMAN+=(--storage-driver "$STORAGE_DRIVER")
ULIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

# --- base image: debootstrap + podman import ---------------------------------------
debian_mirror() {
    # The first Debian archive URI in the apt sources (one-line or deb822 format).
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
              /etc/apt/sources.list.d/*.sources 2>/dev/null \
          | grep -v '^[[:space:]]*#' | grep -oE 'https?://[^ ]+/debian/?([[:space:]]|$)' \
          | head -1 | tr -d '[:space:]') || true
    echo "${uri:-http://deb.debian.org/debian}"
}

if ((build)) && ! "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
    t0=$SECONDS
    mirror=$(debian_mirror)
    rootfs=$WORK/rootfs-$SUITE
    rm -rf "$rootfs"
    log "debootstrap $SUITE from $mirror into $rootfs"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >"$OUT/debootstrap.log" 2>&1 \
        || { tail -20 "$OUT/debootstrap.log" >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    log "podman import -> $BASE_IMAGE"
    tar --numeric-owner --sort=name --mtime=@0 -C "$rootfs" -c . \
        | "${PODMAN[@]}" import -q --change 'CMD ["/bin/bash"]' \
            --message "debootstrap --variant=minbase $SUITE $mirror" - "$BASE_IMAGE" >/dev/null
    rm -rf "$rootfs"
    record base "$((SECONDS - t0))"
fi

# --- CPU image ---------------------------------------------------------------------
build_args=(--network=host "${ULIMITS[@]}"
    --build-arg "GIT_COMMIT=$(git describe --always --dirty --abbrev=40 2>/dev/null || echo unknown)")
if [ -d "$UV_CACHE_HOST" ]; then
    # Reuse the wheels the host's .venv came from (uv locks its cache; copies, no links).
    build_args+=(-v "$UV_CACHE_HOST:/host-uv-cache" --build-arg UV_CACHE_DIR=/host-uv-cache)
fi
if [ -f "$CA_BUNDLE" ]; then
    build_args+=(-v "$CA_BUNDLE:/run/ddpbench-build-ca.crt:ro"
        --build-arg BUILD_CA_BUNDLE=/run/ddpbench-build-ca.crt)
fi

write_digest() { # image name -> containers/build/<name>.digest (the image ID, sha256:...)
    local id
    id=$("${PODMAN[@]}" image inspect --format '{{.Id}}' "localhost/$1")
    echo "sha256:${id#sha256:}" >"$OUT/${1%%:*}.digest"
    log "$1 image ID sha256:${id#sha256:}"
}

build_image() { # dockerfile name:tag [extra podman build args...]
    local dockerfile=$1 name=$2 t0=$SECONDS size
    shift 2
    local logfile=$OUT/build-${name%%:*}.log
    log "podman build $name from $dockerfile (log: $logfile)"
    "${PODMAN[@]}" build "${build_args[@]}" --build-arg "IMAGE_NAME=$name" "$@" \
        -f "$dockerfile" -t "localhost/$name" . >"$logfile" 2>&1 \
        || { tail -30 "$logfile" >&2; exit 1; }
    write_digest "$name"
    record "build ${name%%:*}" "$((SECONDS - t0))"
    size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "localhost/$name")
    log "$name size $((size / 1000000)) MB"
}

smoke_cell() { # name:tag device [extra podman run args...]
    local name=$1 device=$2 t0=$SECONDS digest
    shift 2
    local smoke_out=$OUT/smoke-${name%%:*}
    digest=$(cat "$OUT/${name%%:*}.digest")
    rm -rf "$smoke_out" && mkdir -p "$smoke_out"
    log "smoke cell in $name ($device, world size 2, synthetic, mlp) -> $smoke_out"
    # The runner passes the digest it knows (an image cannot contain its own);
    # ddpbench.core.container.image_identity() joins it to the name baked into the image.
    "${PODMAN[@]}" run --rm --network=host --shm-size=1g "${ULIMITS[@]}" "$@" \
        -e "DDPBENCH_CONTAINER_DIGEST=$digest" -v "$smoke_out:/out" "localhost/$name" \
        python -m ddpbench launch --nproc-per-node 2 --out /out \
            --device "$device" --strategy ddp --model mlp --dataset synthetic \
            --batch-size 32 --dataset-size 512 --max-steps 6 --warmup-steps 1 \
            --threads-per-rank 1 --timeout-s 300 2>&1 | tee "$smoke_out.log" >&2
    python3 - "$smoke_out/summary.json" "$name" "$digest" <<'EOF'
import json, sys
path, name, digest = sys.argv[1:]
with open(path) as f:
    s = json.load(f)
image = (s.get("env") or {}).get("container_image")
problems = []
if s.get("status") != "ok":
    problems.append(f"status {s.get('status')!r}: {s.get('reason')}")
if s.get("world_size") != 2:
    problems.append(f"world_size {s.get('world_size')!r}")
if not (s.get("samples_per_s") or 0) > 0:
    problems.append(f"samples_per_s {s.get('samples_per_s')!r}")
if image != f"{name}@{digest}":
    problems.append(f"env.container_image {image!r} is not {name}@{digest}")
if problems:
    sys.exit("smoke summary invalid: " + "; ".join(problems))
print(f"[containers] smoke ok: {image}, {s['samples_per_s']:.1f} samples/s", file=sys.stderr)
EOF
    record "smoke ${name%%:*}" "$((SECONDS - t0))"
}

if ((build)); then
    build_image containers/cpu.Dockerfile "$CPU_NAME" --build-arg "BASE_IMAGE=$BASE_IMAGE"
fi
if ((smoke)); then
    smoke_cell "$CPU_NAME" cpu
fi

if ((standin)); then
    # All of the CUDA image but its base: the same Dockerfile on the local bookworm
    # base (bookworm names its Python 3.11 packages as Ubuntu 22.04 does).
    if ((build)); then
        build_image containers/cuda.Dockerfile "$STANDIN_NAME" --build-arg "BASE_IMAGE=$BASE_IMAGE"
    fi
    if ((smoke)); then
        smoke_cell "$STANDIN_NAME" cpu
    fi
fi

if ((cuda)); then
    if ((build)); then
        build_image containers/cuda.Dockerfile "$CUDA_NAME"
    fi
    if ((smoke)); then
        read -r -a gpu_flags <<<"${DDPBENCH_PODMAN_GPU_FLAGS:---device nvidia.com/gpu=all}"
        smoke_cell "$CUDA_NAME" cuda "${gpu_flags[@]}"
    fi
fi
record total "$((SECONDS - t_start))"
