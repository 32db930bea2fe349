"""gspo_sequence_ratio: the toy's claims in the statement hold on every seed they are quoted for."""

from __future__ import annotations

import pytest
import torch
from conftest import all_seeds

from grader.judge.expectations import reference_series
from grader.model.problem import Problem

PROBLEM = "gspo_sequence_ratio"
QUOTED_SEEDS = range(40)  # "the 40 seeds 0 to 39 and the judge's seven"


@pytest.fixture(scope="module")
def sweeps(problem: Problem) -> list[dict[str, torch.Tensor]]:
    """The reference's series as the judge runs its toy, at every quoted seed."""
    return [reference_series(problem, seed)[0] for seed in [*QUOTED_SEEDS, *all_seeds(problem)]]


def test_the_toys_quoted_ranges_hold_on_every_seed(sweeps: list[dict[str, torch.Tensor]]) -> None:
    for s in sweeps:
        late = s["noise_sigma"] >= 0.3 - 1e-9
        assert 0.97 <= float((s["seq_log_ratio_error"] / s["seq_log_ratio_theory"]).mean()) <= 1.04
        assert float(s["seq_clipfrac"].max()) <= 0.11
        assert 0.32 <= float(s["token_clipfrac"][-1]) <= 0.43
        assert bool((s["token_clipfrac"][late] >= 3 * s["seq_clipfrac"][late]).all())
        assert 0.16 <= float(s["seq_weight_cv"][-1]) <= 0.37 and 1.01 <= float(s["token_weight_cv"][-1]) <= 1.19
        assert bool((s["token_weight_cv"] >= 2.7 * s["seq_weight_cv"]).all())
