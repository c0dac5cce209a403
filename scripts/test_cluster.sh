#!/usr/bin/env bash
# The on-request cluster tests (root; not part of scripts/test.sh):
#   bash scripts/test_cluster.sh [slurm|multinode|all] [pytest args...]
# slurm:     a one-node SLURM cluster on localhost (apt-get installs slurm-wlm, munge
#            if missing) runs configs/tiny.yaml through profiles/slurm.
# multinode: two network namespaces joined by a veth pair run a 2-node cell, then
#            over links shaped to 100 and 20 Mbit/s.
# all:       both, and a 2-node SLURM cluster (slurmd n0, n1 in the two namespaces)
#            running a cell with `sbatch -N 2` (markers slurm and multinode).
source "$(dirname "$0")/bootstrap.sh"
which=${1:-all}
shift || true
case "$which" in
    slurm) marker="slurm and not multinode" ;;
    multinode) marker="multinode and not slurm" ;;
    all) marker="slurm or multinode" ;;
    *) echo "usage: $0 [slurm|multinode|all] [pytest args...]" >&2; exit 2 ;;
esac
pytest -m "$marker" tests/cluster -s --durations=0 "$@"
