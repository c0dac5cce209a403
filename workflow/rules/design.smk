# repeats: until_decided. Every cell runs `first` times; then decide_round judges every
# question on the runs so far and writes RESULTS/design/round~R.json: the repeat count each
# cell with an open question moves to next. Its targets are the next round's runs (the train
# rule's missing repeats), so a killed design resumes mid-round and no run is measured twice;
# a decision without targets is the last, and the tables and report take its runs
# (ddpbench.analysis.design). A checkpoint: Snakemake plans each next round once its
# decision exists; `snakemake -n` shows the first round, the plan line the most it could run.
import json


wildcard_constraints:
    round=r"\d+",


localrules:
    decide_round,


checkpoint decide_round:
    input:
        summaries=lambda wildcards: run_summaries(design_counts(int(wildcards.round))),
    output:
        decision=f"{DESIGN_DIR}/round~{{round}}.json",
    log:
        f"{RESULTS}/logs/decide_round/round~{{round}}.log",
    params:
        # A changed setting (budget, margin, ...) decides the rounds again from the runs kept.
        settings=lambda wildcards: repr(DESIGN),
    run:
        decide(int(wildcards.round), input.summaries, output.decision, log[0])


def design_counts(last_round):
    """Repeat counts of round `last_round`'s runs: the first round's, moved on by the
    decisions before it (each a checkpoint, so Snakemake plans a round once the one before
    it has been decided)."""
    counts = design.first_counts(list(CELL_BY_PATH), DESIGN)
    for r in range(last_round):
        decision = checkpoints.decide_round.get(round=r).output.decision
        counts = design.counts_after(
            counts, json.loads(Path(decision).read_text()), DESIGN
        )
    return counts


def final_round():
    """The round whose decision has no targets (the design's last), via the checkpoints."""
    r = 0
    while True:
        decision = checkpoints.decide_round.get(round=r).output.decision
        if json.loads(Path(decision).read_text())["done"]:
            return r
        r += 1


def final_decision(wildcards):
    """The last decision's file (the report's decision table), none in a fixed design."""
    if not SEQUENTIAL:
        return []
    return [checkpoints.decide_round.get(round=final_round()).output.decision]


def decide(round_, summaries, out, log):
    """decide_round's job: the decision after this round from its runs' summaries; one line
    to the terminal and the log, and the next round's runs added to the progress count.
    """
    runs = {cell: [] for cell in CELL_BY_PATH}
    for path in summaries:
        runs[design.cell_of_run(path, RESULTS)].append(path)
    decision = design.decide(round_, QUESTIONS, runs, DESIGN)
    design.write_decision(out, decision)
    more = sum(n - decision["counts"][c] for c, n in decision["targets"].items())
    progress.add_round(round_ + 2, more)
    line = design.round_line(decision)
    Path(log).write_text(line + "\n")
    print(line, flush=True)
