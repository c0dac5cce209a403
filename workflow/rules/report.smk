# Statistics, scaling-law fits, figures and the HTML/LaTeX report from the tidy tables.
# Every output registered with report() appears in `snakemake --report report.html`;
# to add one: one line here and its caption in report/captions/. --log: output to the
# log, the report's path (or a full disk's explanation) to the terminal. --results: no
# folder below the results folder is followed if a link (docs/security.md).


rule report:
    input:
        runs=f"{RESULTS}/aggregate/runs.csv",
        steps=f"{RESULTS}/aggregate/steps.csv",
        baseline=[COMPARE_TO] if COMPARE_TO else [],
        design=final_decision,
    output:
        html=report(
            f"{RESULTS}/report/report.html",
            caption="../../report/captions/report.rst",
            category="Report",
            labels={"file": "report.html"},
        ),
        cells=report(
            f"{RESULTS}/report/cells.csv",
            caption="../../report/captions/cells.rst",
            category="Tables",
            labels={"table": "per-cell statistics"},
        ),
        speedup=report(
            f"{RESULTS}/report/speedup.csv",
            caption="../../report/captions/speedup_table.rst",
            category="Tables",
            labels={"table": "speedup and efficiency"},
        ),
        comparisons=report(
            f"{RESULTS}/report/comparisons.csv",
            caption="../../report/captions/comparisons.rst",
            category="Tables",
            labels={"table": "strategy comparisons"},
        ),
        links=report(
            f"{RESULTS}/report/links.csv",
            caption="../../report/captions/links.rst",
            category="Tables",
            labels={"table": "links"},
        ),
        fits=report(
            f"{RESULTS}/report/fits.csv",
            caption="../../report/captions/fits.rst",
            category="Tables",
            labels={"table": "scaling-law fits"},
        ),
        predictions=report(
            f"{RESULTS}/report/predictions.csv",
            caption="../../report/captions/predictions.rst",
            category="Tables",
            labels={"table": "step model on held-out cells"},
        ),
        figures=report(
            directory(f"{RESULTS}/report/figures"),
            patterns=["{figure}.svg"],
            caption="../../report/captions/figures.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        out_dir=subpath(output.html, parent=True),
        baseline_strategy=config["baseline"]["strategy"],
        max_rel_ci=STUDY.stability_threshold,
        plan=PLAN_FILE,
        compare_to=lambda wildcards, input: (
            f"--compare-to {shlex.quote(input.baseline[0])}" if input.baseline else ""
        ),
        study=" ".join(f"--study {shlex.quote(name)}" for name in STUDY.study_names),
        pdf="" if config["report_pdf"] else "--no-pdf",
        design=lambda wildcards, input: (
            f"--design {shlex.quote(input.design[0])}" if input.design else ""
        ),
        results=subpath(output.html, ancestor=2),
    shell:
        "python -m ddpbench report --runs {input.runs:q} --steps {input.steps:q}"
        " --baseline-strategy {params.baseline_strategy:q} --max-rel-ci {params.max_rel_ci}"
        " --out {params.out_dir:q} --plan {params.plan:q} --log {log:q} --results {params.results:q}"
        " {params.study} {params.design} {params.pdf} {params.compare_to}"


# `snakemake archive`: the whole study in one file (runs, tables, report, config, lock)
# that `ddpbench report --from` rebuilds elsewhere. Not part of the default target.
rule archive:
    input:
        html=f"{RESULTS}/report/report.html",
        runs=f"{RESULTS}/aggregate/runs.csv",
    output:
        f"{RESULTS}.tar.gz",
    log:
        f"{RESULTS}/logs/archive.log",
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        results=subpath(input.runs, ancestor=2),
    shell:
        "python -m ddpbench archive --results {params.results:q} --out {output:q} --log {log:q}"
