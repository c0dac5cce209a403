# ddpbench: config grid -> one torchrun job per cell and repeat -> tidy tables -> report;
# with repeats: until_decided, rounds of repeats until the grid's questions are decided.
# Helpers live in workflow/rules/common.smk and plan.smk (the grid logic itself in
# src/ddpbench/plan/); the rules in the other workflow/rules/*.smk.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


# common.smk validates the config (schema workflow/schemas/config.schema.yaml, then the
# harness's CellParams), expands the grid and defines the input functions; plan.smk, on
# that grid, checks the results folder and prints the plan and holds the onstart/onerror
# handlers; the other files hold the rules (design.smk: the rounds of until_decided).
include: "workflow/rules/common.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/design.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        get_final_output,


onstart:
    check_results_space()
    record_invocation()
    save_plan()
    start_progress()


# A full or read-only results filesystem fails every job alike: say so once, at the end.
onerror:
    explain_failure()


onsuccess:
    print(f"ddpbench: report at {Path(RESULTS, 'report', 'report.html').resolve()}")
