# Statistics, scaling-law fits, figures and the HTML report from the tidy tables. Each
# output registered with report() appears in `snakemake --report`; to add one, add a
# line here and its caption in report/captions/.


rule report:
    input:
        runs=f"{RESULTS}/aggregate/runs.csv",
        steps=f"{RESULTS}/aggregate/steps.csv",
    output:
        html=report(
            f"{RESULTS}/report/report.html",
            caption="../../report/captions/report.rst",
            category="Report",
            labels={"file": "HTML report"},
        ),
        fits=report(
            f"{RESULTS}/report/fits.csv",
            caption="../../report/captions/fits.rst",
            category="Scaling fits",
            labels={"file": "fits.csv"},
        ),
    log:
        f"{RESULTS}/logs/report.log",
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        out_dir=subpath(output.html, parent=True),
    shell:
        "python -m ddpbench.report --runs {input.runs} --steps {input.steps}"
        " --out {params.out_dir} > {log} 2>&1"
