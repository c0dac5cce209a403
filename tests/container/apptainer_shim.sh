#!/usr/bin/env bash
# A stand-in `apptainer` for machines that have podman but no Apptainer (Debian does not
# package it): enough of `apptainer --version` and `apptainer exec` for Snakemake's
# --use-singularity to run jobs in a podman image. The ".sif" it is given is a text file
# holding the podman image reference (localhost/ddpbench-cpu:0.1.0). Used by
# tests/container/test_container.py to check the workflow's `container:` wiring.
set -euo pipefail
if [ "${1:-}" = --version ]; then echo "apptainer version 1.3.6-shim"; exit 0; fi
home=$PWD pwd_in=
binds=()
while (($#)); do
    case $1 in
        --quiet | --silent) shift ;;
        exec) shift ;;
        --home) home=$2; shift 2 ;;
        --pwd) pwd_in=$2; shift 2 ;;
        --bind | -B) binds+=(-v "${2%%:*}:${2#*:}"); shift 2 ;;  # src[:dst[:opts]]
        --nv | --cleanenv | --containall) shift ;;
        -*) echo "apptainer shim: unsupported option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
sif=$1; shift
image=$(cat "$sif")
envs=()
while IFS='=' read -r key value; do   # APPTAINERENV_X / SINGULARITYENV_X -> X
    case $key in APPTAINERENV_* | SINGULARITYENV_*) envs+=(-e "${key#*ENV_}=$value") ;; esac
done < <(env)
exec podman --runtime runc --cgroup-manager cgroupfs run --rm --network=host --shm-size=1g \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    -v "$home:$home" -w "${pwd_in:-$home}" -e "HOME=$home" "${binds[@]}" "${envs[@]}" \
    -v "$(realpath "$sif"):$(realpath "$sif")" -e "APPTAINER_CONTAINER=$(realpath "$sif")" \
    "$image" "$@"
