#!/usr/bin/env bash
# The main job: the default grid of config.yaml on the synthetic dataset, then the report.
# Extra arguments go to snakemake, e.g. `--configfile configs/tiny.yaml`.
source "$(dirname "$0")/bootstrap.sh"
# A lock left by a killed snakemake (SIGKILL, power loss) would stop the run with
# LockException: unlock it when no snakemake runs in this directory; stop, naming the PID,
# when one does (docs/configuration.md, Troubleshooting).
python -m ddpbench status --unlock-stale --profile profiles/default "$@"
snakemake --profile profiles/default "$@"
