"""The sequential design's statistics (analysis.sequential): verdicts, rounds, and by simulation
with the real stopping rule, that its calls and intervals keep their stated level however the
rounds end, where looking at ordinary 95 % intervals after every round does not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddpbench.analysis import rounds as rounds_mod, sequential as S

Q = S.Question


def values_with(ratio: float, n: int, sigma: float = 0.05, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"a": list(100 * ratio * np.exp(sigma * rng.standard_normal(n))), "b": list(100 * np.exp(sigma * rng.standard_normal(n)))}


def test_verdicts_follow_the_interval():
    assert S.judge(Q(("a", "b"), 0.05), values_with(1.5, 5)).verdict == "faster"
    assert S.judge(Q(("a", "b"), 0.05), values_with(0.6, 5)).verdict == "slower"
    # Equal throughputs, many quiet runs: the interval fits inside ±5 %.
    assert S.judge(Q(("a", "b"), 0.05), values_with(1.0, 40, sigma=0.02)).verdict == "equivalent"
    # Equal throughputs, few noisy runs: open, never "no difference".
    v = S.judge(Q(("a", "b"), 0.05), values_with(1.0, 3, sigma=0.1))
    assert v.verdict == "open" and v.low < 1 < v.high and v.runs == (3, 3)
    assert S.judge(Q(("a",), 0.05), values_with(1.0, 40, sigma=0.02)).verdict == "met"
    assert S.judge(Q(("a",), 0.05), values_with(1.0, 3, sigma=0.1)).verdict == "open"
    assert S.judge(Q(("a", "b"), 0.05), {"a": [1.0]}).verdict == "open"


def test_a_round_goes_to_open_cells_most_open_first_and_the_budget_cuts_it():
    questions = [Q(("fast",), 0.05), Q(("slow", "fast"), 0.05), Q(("x", "fast"), 0.05), Q(("x",), 0.05),
                 Q(("fast", "y"), 0.05)]  # fmt: skip
    rng = np.random.default_rng(1)
    noisy = lambda mean: list(mean * np.exp(0.1 * rng.standard_normal(3)))  # noqa: E731
    values = {"fast": noisy(200), "slow": list(100 * np.exp(0.01 * rng.standard_normal(3))), "x": noisy(200), "y": noisy(200)}
    rnd = S.plan_round(questions, values)
    verdicts = {v.question.cells: v.verdict for v in rnd.verdicts}
    assert verdicts[("slow", "fast")] == "slower"  # 2x apart: decided at 3 runs each
    # slow's one question is decided: it stops; the others move to the schedule's next count,
    # fast first (3 open questions, x 2, y 1).
    assert rnd.stopped == {"slow": "decided"} and rnd.targets == {"fast": 5, "x": 5, "y": 5}
    assert list(rnd.targets) == ["fast", "x", "y"]
    cut = S.plan_round(questions, values, runs_left=5)
    assert cut.targets == {"fast": 5, "x": 5} and cut.stopped["y"] == "budget"
    capped = {c: list(v) * 14 for c, v in values.items()}  # 42 runs each: past the cap of 40
    assert S.plan_round(questions, capped).stopped.get("y") in ("cap", "decided")


def test_the_schedule_bounds_the_looks():
    assert S.next_count(0) == 3 and S.next_count(3) == 5 and S.next_count(40) is None
    looks = S.comparison_looks()
    assert looks[0] == (3, 3) and looks[-1] == (40, 40) and len(looks) == 2 * len(S.SCHEDULE) - 1


def test_look_alpha_is_what_calibration_gives():
    """Re-derived over every look path and noise ratio (40,000 replicates each: the constant
    comes from 400,000, rounded down); the path and ratio that set it are the staircase with the
    noisier cell behind, and noisier cells need a smaller per-look level."""
    alpha, each = S.calibrate_look_alpha(reps=40_000, seed=1)
    assert alpha == pytest.approx(S.LOOK_ALPHA, abs=0.0008) and S.LOOK_ALPHA <= alpha + 0.0003
    assert set(each) == {(p, r) for p in S.look_paths() for r in S.NOISE_RATIOS}
    assert min(each, key=each.get)[1] == max(S.NOISE_RATIOS)
    assert each[("A first", 3.0)] < each[("A first", 1.7)] < each[("A first", 1.0)]


def test_the_look_paths_are_monotone_walks_through_the_schedule():
    for name, looks in S.look_paths().items():
        assert looks[0][0] == S.SCHEDULE[0] and looks[-1] == (S.SCHEDULE[-1], S.SCHEDULE[-1]), name
        assert all(a1 >= a0 and b1 >= b0 for (a0, b0), (a1, b1) in zip(looks, looks[1:])), name
        assert all(a in S.SCHEDULE and b in S.SCHEDULE for a, b in looks), name
        assert len(looks) == (len(S.SCHEDULE) if name == "together" else 2 * len(S.SCHEDULE) - 1), name


def test_runs_to_decide_grows_as_the_difference_shrinks():
    q = Q(("a", "b"), 0.05)
    wide = values_with(1.03, 5, sigma=0.1, seed=3)
    near = S.runs_to_decide(S.judge(q, wide), wide)
    far_values = values_with(1.3, 3, sigma=0.1, seed=3)
    far = S.runs_to_decide(S.judge(q, far_values), far_values)
    assert near is not None and near > 5 and (far is None or far < near)


SIGMAS = (0.04, 0.08, 0.12)


def simulate(grids: int, alpha: float, seed: int = 0, precision_alpha: float = S.PRECISION_ALPHA,
             blocked: bool = True) -> dict:
    """Grids of a baseline `single` and strategies `a` at 0.55x (every p = 2 strategy here is
    slower than one process), `b` equal to `a` (no difference), `c` 4 % above `b` (close), `d` at
    0.6x; each cell's noise drawn from SIGMAS (unequal). Precision of single, a, b, c; each
    strategy against single; each pair of a, b, c; run with the real stopping rule (run_design)."""
    rng = np.random.default_rng(seed)
    truth = {"single": 100.0, "a": 55.0, "b": 55.0, "c": 55.0 * 1.04, "d": 60.0}
    questions = [Q((c,), S.TARGET) for c in ("single", "a", "b", "c")]
    questions += [Q((c, "single"), S.MARGIN) for c in ("a", "b", "c", "d")]  # d: asked nothing else
    questions += [Q(pair, S.MARGIN) for pair in (("a", "b"), ("a", "c"), ("b", "c"))]
    null_calls = covered = total = runs_single_vs = runs_close = 0
    for _ in range(grids):
        sigma = {c: SIGMAS[rng.integers(len(SIGMAS))] for c in truth}

        def measure(cell, k):
            return list(truth[cell] * np.exp(sigma[cell] * rng.standard_normal(k)))

        verdicts, runs, _ = S.run_design(questions, measure, alpha=alpha, precision_alpha=precision_alpha, blocked=blocked)
        for v in verdicts:
            true = truth[v.question.cells[0]] / (truth[v.question.cells[1]] if len(v.question.cells) == 2 else 1)
            if math.isfinite(v.low):
                total += 1
                covered += v.low <= true <= v.high
            if v.question.cells == ("a", "b"):
                null_calls += v.verdict in ("faster", "slower")
        runs_single_vs += runs["d"]
        runs_close += runs["c"]
    return {"null_calls": null_calls / grids, "coverage": covered / total, "runs_d": runs_single_vs / grids,
            "runs_c": runs_close / grids}  # fmt: skip


@pytest.mark.slow
def test_the_design_keeps_its_level_however_it_stops():
    """2,000 simulated grids, each run to the end by the real stopping rule."""
    grids = 2000
    out = simulate(grids, S.LOOK_ALPHA)
    se = math.sqrt(0.05 * 0.95 / grids)
    assert out["null_calls"] <= 0.05 + 2 * se, out  # a difference called where there is none
    assert out["coverage"] >= S.LEVEL - 2 * math.sqrt(0.05 * 0.95 / (grids * 10)), out
    # The runs go where the questions are open: `d` (0.6x of single, asked nothing else) stops
    # at its second round (5 runs: nothing is decided after one); `c`, 4 % above `b`, stays open for long.
    assert out["runs_d"] < 5.5 and 30 < out["runs_c"], out


@pytest.mark.slow
def test_looking_at_95_percent_intervals_after_every_round_calls_differences_that_are_not_there():
    """The naive rule (stop at the first 95 % interval that excludes 1) on the same grids and
    looks (judged as one block, no between-round term): its false calls (8.3 % when written)
    exceed the 5 % it would claim, beyond noise."""
    grids = 1000
    out = simulate(grids, alpha=0.05, seed=1, precision_alpha=0.05, blocked=False)
    assert out["null_calls"] > 0.05 + 3 * math.sqrt(0.05 * 0.95 / grids), out


@pytest.mark.parametrize("sigma", SIGMAS)
def test_a_cell_stopped_on_its_width_keeps_its_coverage(sigma):
    """A precision question stops once its interval is narrow enough: at PRECISION_ALPHA the
    interval it reports still covers the truth in >= 95 % of cells; at the plain 95 % level it
    does not (stopping when the spread happens to be small), so the test can fail."""
    reps = 20_000
    slack = 2 * math.sqrt(0.05 * 0.95 / reps)
    assert S.precision_coverage(S.PRECISION_ALPHA, sigma, reps=reps, seed=2) >= S.LEVEL - slack
    assert S.precision_coverage(0.05, sigma, reps=reps, seed=2) < S.LEVEL - slack


def test_an_open_question_is_never_estimated_to_need_no_runs():
    """A question open at 5 runs, whose normal approximation would already call it, still needs
    runs under the t quantile the design uses."""
    q = Q(("a", "b"), 0.1)
    values = values_with(0.55, 5, sigma=0.35, seed=4)
    v = S.judge(q, values)
    assert v.verdict == "open", v
    assert S.runs_to_decide(v, values) >= 1


def test_a_question_the_budget_left_cannot_close_is_out_of_reach_from_its_second_look_and_gets_no_runs():
    q = Q(("a", "b"), 0.05)
    reachable = values_with(1.01, 5, sigma=0.03, seed=2)
    need = S.runs_to_decide(S.judge(q, reachable), reachable)
    assert 5 < need < S.SCHEDULE[-1] - 5
    # beside a question it can close, the budget goes there: this one is out of reach
    other = Q(("c",), 0.05)
    values = {**reachable, "c": list(100 * np.exp(0.04 * np.random.default_rng(5).standard_normal(5)))}
    assert S.plan_round([other], values).targets == {"c": 8}  # open, and closes soon
    rnd = S.plan_round([q, other], values, runs_left=2 * need - 2)  # a run short for each of a and b
    v = rnd.verdicts[0]
    assert v.verdict == S.OUT_OF_REACH and not v.decided
    assert rnd.targets == {"c": 8} and rnd.stopped == {"a": S.OUT_OF_REACH, "b": S.OUT_OF_REACH}
    assert S.plan_round([q, other], values, runs_left=2 * need + 2).targets == {"a": 8, "b": 8, "c": 8}
    timed = S.plan_round([q, other], values, seconds_left=(need - 1) * 2.0, run_seconds={"a": 1.0, "b": 1.0, "c": 1.0})
    assert timed.verdicts[0].verdict == S.OUT_OF_REACH
    # alone, with nothing else to spend the budget on, it gets what is left after all
    alone = S.plan_round([q], reachable, runs_left=2 * need - 2)
    assert alone.verdicts[0].verdict == "open" and alone.targets == {"a": 8, "b": 8}
    first_look = {c: x[:3] for c, x in reachable.items()}  # at its first look it still gets runs
    assert S.plan_round([q], first_look, runs_left=4).targets == {"a": 5, "b": 5}
    # at its cells' cap it stops there ("cap"), whatever the budget left
    assert S.plan_round([q], reachable, runs_left=0, schedule=(3, 5)).stopped == {"a": "cap", "b": "cap"}
    # the cap alone does not make it so: a question that needs more than the cap runs to it
    noisy = values_with(1.01, 5, sigma=0.15, seed=2)
    assert S.runs_to_decide(S.judge(q, noisy), noisy) > S.SCHEDULE[-1]
    assert S.plan_round([q], noisy).targets == {"a": 8, "b": 8}


def test_the_budget_goes_first_to_the_cells_whose_questions_close_soonest():
    """Two open comparisons against one base, room for two cells' rounds: the cell whose question
    is about to close gets it, not the one with the wider interval (the order before)."""
    rng = np.random.default_rng(4)
    values = {"base": list(100 * np.exp(0.02 * rng.standard_normal(5))),
              "close": list(107 * np.exp(0.04 * rng.standard_normal(5))),
              "far": list(110 * np.exp(0.08 * rng.standard_normal(5)))}  # fmt: skip
    questions = [Q(("close", "base"), 0.05), Q(("far", "base"), 0.05)]
    verdicts = {v.question.cells[0]: v for v in S.plan_round(questions, values).verdicts}
    need = {c: S.runs_to_decide(verdicts[c], values) for c in ("close", "far")}
    width = {c: verdicts[c].high / verdicts[c].low for c in ("close", "far")}
    assert need["close"] < need["far"] <= 3 and width["far"] > width["close"], (need, width)
    rnd = S.plan_round(questions, values, runs_left=7)  # base and one other cell move 5 -> 8
    assert list(rnd.targets) == ["base", "close"] and rnd.stopped["far"] == "budget"  # far: reachable, cut


def test_a_comparisons_two_cells_advance_in_the_same_round_or_neither():
    """Under a budget cut a cell runs together with the partner of its open comparison: room
    for one cell's runs alone buys neither (so both carry the same rounds). A cell with its own
    precision question open runs alone, and so does one whose partner is at its cap."""
    q = Q(("a", "b"), 0.05)
    values = values_with(1.0, 3, sigma=0.1)  # open at its first look
    cut = S.plan_round([q], values, runs_left=3)  # a alone (2 runs) would fit, the pair (4) does not
    assert cut.targets == {} and cut.stopped == {"a": "budget", "b": "budget"}
    assert S.plan_round([q], values, runs_left=4).targets == {"a": 5, "b": 5}
    assert S.plan_round([q, Q(("a",), 0.05)], values, runs_left=3).targets == {"a": 5}
    at_cap = {"a": values["a"], "b": values["b"] + values_with(1.0, 2, sigma=0.1, seed=1)["b"]}
    rnd = S.plan_round([q], at_cap, runs_left=2, schedule=(3, 5))
    assert rnd.targets == {"a": 5} and rnd.stopped == {"b": "cap"}


def grid_with_rounds(cells: int, sizes, job: float, sigma: float, seed: int) -> tuple[dict, dict]:
    """`cells` cells of one throughput, measured in rounds of `sizes` runs, each round of a cell
    shifted by its own log-normal effect of sd `job`."""
    rng = np.random.default_rng(seed)
    values, rounds = {}, {}
    for c in range(cells):
        for r, k in enumerate(sizes):
            shift = job * rng.standard_normal()
            values.setdefault(c, []).extend(100 * np.exp(shift + sigma * rng.standard_normal(k)))
            rounds.setdefault(c, []).extend([r] * k)
    return values, rounds


def test_the_between_round_noise_is_estimated_from_the_rounds_and_widens_the_intervals():
    values, rounds = grid_with_rounds(60, (3, 2, 3, 3), job=0.05, sigma=0.03, seed=3)
    sd, dof = S.round_noise(values, rounds)
    assert dof == 60 * 3 and 0.04 < sd < 0.06, sd
    quiet, quiet_rounds = grid_with_rounds(60, (3, 2, 3, 3), job=0.0, sigma=0.03, seed=3)
    assert S.round_noise(quiet, quiet_rounds)[0] < 0.015  # none there: about 0
    one_round = {c: [0] * len(v) for c, v in values.items()}
    assert S.round_noise(values, one_round) == (0.0, 0) and S.round_noise(values, None) == (0.0, 0)
    # a cell mean keeps sum(n_r^2) / n^2 of a round effect's variance: all of it from one round
    assert rounds_mod.round_weight(np.array(rounds[0]), 11) == pytest.approx((9 + 4 + 9 + 9) / 121)
    assert rounds_mod.round_weight(np.zeros(11), 11) == 1.0
    q = Q((0, 1), 0.05)
    width = lambda v: math.log(v.high / v.low)  # noqa: E731
    plain, blocked = S.judge(q, values), S.judge(q, values, rounds=rounds, job_sd=sd)
    assert width(plain) < width(blocked) < width(S.judge(q, values, rounds=one_round, job_sd=sd))
    assert blocked.estimate == plain.estimate
    # and the runs to decide count the rounds still to come, each with its own effect
    v = S.judge(Q((0, 1), 0.01), values, rounds=rounds, job_sd=sd)
    assert S.runs_to_decide(v, values, rounds=rounds, job_sd=sd) > S.runs_to_decide(S.judge(Q((0, 1), 0.01), values), values)


@pytest.mark.slow
def test_with_a_job_effect_the_blocked_analysis_keeps_the_level_where_the_unblocked_one_does_not():
    """One pair of equal strategies, every cell and round shifted by its own 5 % job effect (runs
    3 %), margin a factor 1.15: judged with the between-round noise and decided only after two
    rounds, the final interval covers the truth in about 93 % of designs; judged on the runs'
    spread alone, in about 79 % (4 and 8.5 % false calls at a 3 % effect: docs/report.md)."""
    q = Q(("a", "b"), 0.15)
    rng = np.random.default_rng(8)
    covered = {True: 0, False: 0}
    grids = 400
    for _ in range(grids):
        def measure(cell, k):
            return list(100 * np.exp(0.05 * rng.standard_normal() + 0.03 * rng.standard_normal(k)))

        state = rng.bit_generator.state
        for blocked in (True, False):
            rng.bit_generator.state = state  # the same draws both ways
            (v,), _, _ = S.run_design([q], measure, blocked=blocked)
            covered[blocked] += v.low <= 1 <= v.high
    slack = 3 * math.sqrt(0.05 * 0.95 / grids)
    assert covered[True] / grids >= S.LEVEL - slack, covered
    assert covered[False] / grids < S.LEVEL - slack, covered


def test_the_simulated_design_refuses_a_run_budget_below_its_first_round_as_the_plan_does():
    """Issue 68: the budget bounds the whole design; run_design had cut its first round to the budget
    where the workflow ran it whole."""
    questions = [S.Question(("a", "b"), 0.05), S.Question(("c",), 0.05)]
    with pytest.raises(ValueError, match="a run budget of 8 cannot pay the first round's 9 runs"):
        S.run_design(questions, lambda cell, k: [100.0] * k, budget_runs=8)
    _, runs, _ = S.run_design(questions, lambda cell, k: [100.0] * k, budget_runs=9)
    assert runs == {"a": 3, "b": 3, "c": 3}
