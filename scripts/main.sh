#!/usr/bin/env bash
# The main job: the default grid of config.yaml on the synthetic dataset, then the report.
# Extra arguments go to snakemake, e.g. `--configfile configs/tiny.yaml`.
source "$(dirname "$0")/bootstrap.sh"
snakemake --profile profiles/default "$@"
