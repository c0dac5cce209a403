"""analysis.rounds and the comparisons judged within rounds (issue 72, item 2): the effect a round
has on every cell is found by the two-way fit and divided out of a comparison, which a cell's own
precision interval keeps. Their rates with the real stopping rule: tests/unit/test_design_rates.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddpbench.analysis import rounds, sequential

Q = sequential.Question


def shared_grid(cells: int = 6, sizes=(3, 2, 3, 3), shared=(0.0, 0.08, -0.06, 0.1), sigma: float = 0.02,
                seed: int = 0) -> tuple[dict, dict]:  # fmt: skip
    """Cells at levels 100 · 1.1^c, each round moving every cell by the same factor exp(shared[r])."""
    rng = np.random.default_rng(seed)
    values: dict = {}
    labels: dict = {}
    for c in range(cells):
        for r, k in enumerate(sizes):
            values.setdefault(c, []).extend(100 * 1.1**c * np.exp(shared[r] + sigma * rng.standard_normal(k)))
            labels.setdefault(c, []).extend([r] * k)
    return values, labels


def test_the_two_way_fit_finds_each_rounds_shared_effect():
    values, labels = shared_grid(sigma=0.0)
    effects, cells = rounds.shared_effects(values, labels)
    assert cells == 6 and list(effects) == [0, 1, 2, 3]
    assert [effects[r] for r in range(4)] == pytest.approx([0.0, 0.08, -0.06, 0.1], abs=1e-9)
    fit = rounds.RoundFit.of(values, labels)
    assert np.allclose(fit.within(values, labels)[2], 100 * 1.1**2)  # what is left is the cell's own level
    # a cell with rounds that do not match its runs is left as it was, and out of the fit
    odd = {**values, "x": [1.0, 2.0]}
    assert fit.within(odd, {**labels, "x": [0]})["x"] == [1.0, 2.0]
    assert "x" not in {c for c, _ in rounds.RoundFit.of(odd, {**labels, "x": [0]}).rows}
    # one round alone says nothing of the rounds' effects
    one = {c: [0] * len(v) for c, v in values.items()}
    assert rounds.shared_effects(values, one) == ({}, 0) and rounds.RoundFit.of(values, one) is None


def test_the_noise_of_one_cells_round_is_estimated_without_bias_however_unevenly_cells_ran():
    """The fit's leverage is counted: a late round with two cells in it gives the round effect most of
    their scatter, which the estimate must not read as quiet."""
    rng = np.random.default_rng(4)
    estimates = []
    for _ in range(200):
        values, labels = {}, {}
        for c in range(8):
            for r, k in enumerate((3, 2, 3, 3, 6)):
                if r >= 2 and c >= 2 + r:  # later rounds fund fewer cells, as a design does
                    continue
                values.setdefault(c, []).extend(100 * np.exp(0.04 * rng.standard_normal() + 0.03 * rng.standard_normal(k)))
                labels.setdefault(c, []).extend([r] * k)
        estimates.append(rounds.RoundFit.of(values, labels).noise[0] ** 2)
    assert math.sqrt(np.mean(estimates)) == pytest.approx(0.04, rel=0.1)


def test_a_comparison_is_judged_within_rounds_and_a_cells_precision_as_measured():
    values, labels = shared_grid(seed=1)
    evidence = sequential.Evidence.of(values, labels)
    raw_sd, _ = evidence.noise
    within_sd, within_dof = evidence.fit.noise
    assert raw_sd > 0.05 and within_sd < 0.02  # the shared effects are the rounds' noise as measured
    assert within_dof == 6 * 4 - 6 - 3  # round means, less the cells' levels and three round effects
    cmp, prec = Q((1, 0), 0.05), Q((1,), 0.05)
    inside, outside = evidence.judge(cmp), sequential.Evidence.of(values, labels, within=False).judge(cmp)
    assert inside.verdict == "faster" and inside.low <= 1.1 <= inside.high
    assert math.log(inside.high / inside.low) < math.log(outside.high / outside.low) / 2
    assert evidence.judge(prec) == sequential.judge(prec, values, rounds=labels, job_sd=raw_sd, job_dof=evidence.noise[1])
    # without rounds there is nothing to divide out
    plain = sequential.Evidence.of(values, None)
    assert plain.within is None and plain.judge(cmp) == sequential.judge(cmp, values)


def test_unequal_runs_in_the_rounds_no_longer_carry_the_shared_effect_into_the_ratio():
    """The second cell ran only in the slow round besides the first: as measured its mean carries
    that round's effect and the ratio is off by it; within rounds it is not."""
    values, labels = shared_grid(sigma=0.005, seed=2)
    values[1] = values[1][:3] + values[1][5:8]  # rounds 0 and 2 only
    labels[1] = labels[1][:3] + labels[1][5:8]
    measured = sequential.judge(Q((1, 0), 0.05), values)
    within = sequential.Evidence.of(values, labels).judge(Q((1, 0), 0.05))
    assert abs(math.log(within.estimate / 1.1)) < 0.01 < abs(math.log(measured.estimate / 1.1))
