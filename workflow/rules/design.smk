# repeats: until_decided. Every cell runs `first` times; then decide_round judges every
# question on the runs so far and writes RESULTS/design/round~R.json: the repeat count each
# cell with an open question moves to next. Its targets are the next round's runs (the train
# rule's missing repeats), so a killed design resumes mid-round and no run is measured twice;
# a decision without targets is the last, and the tables and report take its runs
# (ddpbench.plan.design). A checkpoint: Snakemake plans each next round once its
# decision exists; `snakemake -n` shows the first round, the plan line the most it could run.
from ddpbench.plan.design import RoundError


wildcard_constraints:
    round=r"\d+",


localrules:
    decide_round,


# The job reads the study the results folder recorded (RESULTS/config.yaml, written onstart);
# the summary paths go through stdin, so grids of any size fit.
checkpoint decide_round:
    input:
        summaries=lambda wildcards: STUDY.summaries(design_counts(int(wildcards.round))),
    output:
        decision=LAYOUT.round_file("{round}"),
    log:
        LAYOUT.log("decide_round", "round~{round}.log"),
    conda:
        "../../envs/ddpbench.yaml"
    container:
        image_for_host()
    params:
        # A changed setting (budget, margin, ...) decides the rounds again from the runs kept.
        settings=lambda wildcards: repr(STUDY.settings),
        results=subpath(output.decision, ancestor=2),
    shell:
        "printf '%s\\n' {input.summaries:q} | python -m ddpbench decide --results {params.results:q}"
        " --round {wildcards.round} --out {output.decision:q} --log {log:q}"


def decision_of_round(r):
    """Round r's decision (a checkpoint: Snakemake plans what follows once it exists), read as
    one of this design's rounds (STUDY.decision: bounded, within the rounds its schedule allows,
    each moving a cell on); one that is not stops the workflow, naming it."""
    checkpoints.decide_round.get(round=r)
    try:
        return STUDY.decision(r)
    except RoundError as err:
        raise WorkflowError(
            f"ddpbench: {err}. A round file this design did not write: remove it and the "
            f"round files after it ({LAYOUT.design_dir}) to decide again from the runs kept"
        ) from None


def design_counts(last_round):
    """Repeat counts of round `last_round`'s runs: the first round's, moved on by the
    decisions before it."""
    return STUDY.counts_of_round([decision_of_round(r) for r in range(last_round)])


def final_round():
    """The round whose decision has no targets (the design's last), via the checkpoints."""
    r = 0
    while not decision_of_round(r).done:
        r += 1
    return r


def final_decision(wildcards):
    """The last decision's file (the report's decision table), none in a fixed design."""
    if not STUDY.sequential:
        return []
    return [checkpoints.decide_round.get(round=final_round()).output.decision]
