# Merge every run's summary.json and per-rank step files into two tidy tables. The
# summary paths go through stdin (printf is a shell builtin), so grids of any size fit.
# A damaged run (unreadable summary, missing step files) is a failed row naming it;
# `ddpbench status --rerun` measures it again (plan.smk: name_damaged_runs).
# --log: output to the log, the result line (or a full disk's explanation) to the terminal;
# --results: no folder below the results folder is followed if a link (docs/security.md).


rule aggregate:
    input:
        summaries=all_run_summaries,
    output:
        runs=f"{RESULTS}/aggregate/runs.csv",
        steps=f"{RESULTS}/aggregate/steps.csv",
    log:
        f"{RESULTS}/logs/aggregate.log",
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        results=subpath(output.runs, ancestor=2),
    shell:
        "printf '%s\\n' {input.summaries:q} | python -m ddpbench aggregate --summaries-from -"
        " --runs {output.runs:q} --steps {output.steps:q} --log {log:q} --results {params.results:q}"
