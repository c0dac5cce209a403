# Short names for the project's scripts (each also runs on its own with bash).
.PHONY: main test test-fast test-torch test-unit test-integration test-workflow container slurm-test multinode-test cluster-test dryrun-bench overhead-bench mutation

main:              ## the default grid, then the report (prints its path)
	bash scripts/main.sh

test:              ## everything CI runs
	bash scripts/test.sh

test-fast:         ## the fast tier for the edit loop: unit tests but the slow ones (< 3 min)
	bash scripts/test.sh --fast

TORCH ?= 2.11
test-torch:        ## the strategies' tests on another torch: make test-torch TORCH=2.8 (its own .venv-torch-X)
	bash scripts/test.sh --torch $(TORCH)

test-unit test-integration test-workflow:
	bash scripts/test.sh -m $(subst test-,,$@)

container:         ## build the CPU image without a registry + smoke cell (~8 min)
	bash containers/build.sh

slurm-test:        ## one-node SLURM cluster on localhost, tiny grid (~5 min, root)
	bash scripts/test_cluster.sh slurm

multinode-test:    ## two network namespaces, 2-node cell, shaped links (~4 min, root)
	bash scripts/test_cluster.sh multinode

cluster-test:      ## both, plus a 2-node SLURM cluster (~12 min, root)
	bash scripts/test_cluster.sh all

dryrun-bench:      ## snakemake -n on the default grid and on 5,000 cells
	bash -c 'source scripts/bootstrap.sh && python benchmarks/dryrun_scale.py'

overhead-bench:    ## instrumented vs bare training loop, side by side
	bash -c 'source scripts/bootstrap.sh && python benchmarks/instrumentation_overhead.py'

MUTATION_ARGS ?= --jobs 2
mutation:          ## mutation score of the measuring code's unit tests -> results/mutation/report.md (~45 min, 2 cores)
	bash -c 'source scripts/bootstrap.sh && python scripts/mutation.py $(MUTATION_ARGS)'
