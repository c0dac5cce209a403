# One job per cell and repeat. The launcher validates the flags, runs torchrun, enforces
# the cell's wall-clock limit and always leaves summary.json (status ok|failed|timeout|
# skipped), exiting 0, so a failed cell is a row in runs.csv and never stops the others.
# A CPU cell that would oversubscribe the cores is skipped before any rank starts unless
# the config sets allow_oversubscribe: true.


wildcard_constraints:
    cell=CELL_PATTERN,
    repeat=r"\d+",


rule train:
    input:
        data=prepared_data_for_cell,
    output:
        summary=f"{RUN_DIR}/summary.json",
    log:
        f"{RESULTS}/logs/train/{{cell}}/repeat~{{repeat}}.log",
    priority: repeat_priority
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_cell
    threads: threads_for_cell
    resources:
        timing_slot=1,
        gpus=gpus_for_cell,
        runtime=runtime_minutes_for_cell,
    params:
        run_dir=subpath(output.summary, parent=True),
        topology=launch_topology,
        flags=launcher_flags,
        oversubscribe=oversubscribe_flag,
    shell:
        # The launcher clears an earlier attempt's files itself; it writes its output to
        # the log and its result line to the terminal (the ranks' output: run_dir/train.log).
        # exec: the launcher is Snakemake's own child, so a killed Snakemake stops the cell.
        "exec python -m ddpbench launch {params.topology} --out {params.run_dir:q}"
        " {params.oversubscribe} {params.flags} --log {log:q} --stop-with-parent"


rule prepare_data:
    output:
        record=prepared_data_marker("{dataset}"),
    log:
        f"{RESULTS}/logs/prepare_data/{{dataset}}.log",
    wildcard_constraints:
        dataset="|".join(REAL_DATASETS),
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        root=data_root(),
        image_size=largest_image_size(),
        results=subpath(output.record, ancestor=2),
    shell:
        # The harness's one downloading entry point (torchvision's layout under
        # data_root); its one-line record of what is there is this rule's output.
        # No shell redirection: the verb writes record and log without following a link.
        "python -m ddpbench data --dataset {wildcards.dataset:q} --data-root {params.root:q}"
        " --image-size {params.image_size} --record {output.record:q} --log {log:q}"
        " --results {params.results:q}"
