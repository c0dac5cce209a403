#!/usr/bin/env bash
# The test command: lint and format checks, a dry run of the default grid, then pytest
# (unit, integration, workflow). Extra arguments go to pytest, e.g. `-m unit`.
source "$(dirname "$0")/bootstrap.sh"
echo "== snakemake --lint"
snakemake --lint
echo "== snakefmt --check"
snakefmt --check Snakefile workflow/rules
echo "== snakemake -n (config.yaml)"
snakemake -n --quiet rules
echo "== pytest"
pytest -m "not container and not slurm and not multinode" "$@"
