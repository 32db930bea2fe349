"""grpo_advantages: reference agrees with the oracle, the toy reproduces known values, trivial answers earn nothing."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, checks_of, tier_scores

from grader.judge.accept import accept_observation
from grader.judge.cases import generator_for
from grader.judge.compare import compare_tensors, judge_case
from grader.judge.expectations import reference_series, run_series
from grader.model.problem import Problem
from grader.model.spec import Tolerance
from grader.model.verdicts import Status, Verdict
from grader.worker.protocol import observe_call

PROBLEM = "grpo_advantages"
SUBMISSIONS = ROOT / "submissions" / PROBLEM
# S(p) for G = 8, ddof 0, eps 1e-6, as quoted in the statement's derivation.
KNOWN_SCALE_G8 = {0.05: 2.473, 0.3: 1.963, 0.5: 1.856}

# Trivial answers, each a file of its own for the end-to-end run and a function for the per-case checks.
TRIVIAL_SOURCES = {
    "trivial_zeros": "return torch.zeros_like(rewards)",
    "trivial_ones": "return torch.ones_like(rewards)",
    "trivial_echo": "return rewards.detach().clone()",
    # Right only when std_normalize=False: centring, never dividing by sigma.
    "trivial_centred": "grouped = rewards.detach().reshape(-1, group_size)\n"
                       "    return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)",
}
CENTRED = "trivial_centred"


def _trivial_file(body: str) -> str:
    return ("import torch\n\n\n"
            "def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):\n"
            f"    {body}\n")


def _trivial_functions() -> dict[str, Callable[..., Any]]:
    functions: dict[str, Callable[..., Any]] = {}
    for name, body in TRIVIAL_SOURCES.items():
        namespace: dict[str, Any] = {}
        exec(_trivial_file(body), namespace)  # our own fixed source text
        functions[name] = namespace["grpo_advantages"]
    return functions


def _normalized(kwargs: dict[str, Any]) -> bool:
    return kwargs.get("std_normalize", True) is not False


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(PROBLEM)


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two sample submissions and every trivial answer, graded in one `grade-all` run."""
    folder = tmp_path_factory.mktemp("grpo_submissions")
    for path in SUBMISSIONS.glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    for name, body in TRIVIAL_SOURCES.items():
        (folder / f"{name}.py").write_text(_trivial_file(body))
    out = tmp_path_factory.mktemp("grpo_graded")
    result = run_cli("grade-all", "--problem", PROBLEM, "--submissions", folder, "--out", out, "--jobs", "2")
    assert result.returncode == 0, result.stderr
    return {path.parent.name: json.loads(path.read_text()) for path in out.glob("*/report.json")}


# ---------------------------------------------------------------- in-process: reference, oracle, toy


def test_reference_matches_oracle_on_every_t1_case(problem: Problem) -> None:
    tolerances = problem.tolerances
    failures = []
    for seed in [problem.spec.public_seed, *problem.grading_seeds]:
        for check in problem.spec.checks:
            if check.tier != "T1":
                continue
            assert check.cases is not None and check.expected == "oracle"
            for call in problem.case_generator(check.cases)(generator_for(seed, check.cases)):
                want = observe_call(problem.oracle[call.function], call.kwargs, [], False)
                got = observe_call(problem.reference[call.function], call.kwargs, [], False)
                outcome = judge_case(call.function, call.kwargs, got, want, check.compare, tolerances)
                if outcome.verdict != Verdict.PASS:
                    failures.append(f"seed {seed}, {check.id}, {call.label}: {outcome.mismatch}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("seed_index", [0, 1])
def test_bandit_scale_reproduces_known_values(problem: Problem, seed_index: int) -> None:
    """S(p) depends neither on the reward values nor on the order of the samples that each seed draws."""
    series, _ = reference_series(problem, [problem.spec.public_seed, *problem.grading_seeds][seed_index])
    p = series["success_p"]
    for value, expected in KNOWN_SCALE_G8.items():
        (index,) = (p - value).abs().argmin(dim=0, keepdim=True).tolist()
        assert float(p[index]) == pytest.approx(value, abs=1e-12)
        assert float(series["scale_std_g8"][index]) == pytest.approx(expected, abs=5e-4)
    for group_size in (2, 4, 8, 16):
        flat = torch.full_like(p, 1.0 - 1.0 / group_size)
        assert torch.allclose(series[f"scale_centred_g{group_size}"], flat, rtol=1e-12, atol=0)


def test_reference_series_are_float64_vectors(problem: Problem) -> None:
    series, parts = reference_series(problem, problem.grading_seeds[0])
    assert set(parts) == set(series) and set(parts.values()) == {"scale_curves"}
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(series)
    assert all(v.dtype == torch.float64 and v.dim() == 1 and not v.requires_grad for v in series.values())


def test_no_trivial_answer_passes_any_t1_or_t2_case_on_any_seed(problem: Problem) -> None:
    """Per case, on the public seed and every hidden one; centring alone is trivial only where normalization is due."""
    trivial = _trivial_functions()
    tolerances = problem.tolerances
    passes = []
    for seed in [problem.spec.public_seed, *problem.grading_seeds]:
        for check in problem.spec.checks:
            if check.tier not in ("T1", "T2") or check.cases is None:
                continue
            source = problem.oracle if check.expected == "oracle" else problem.reference
            for call in problem.case_generator(check.cases)(generator_for(seed, check.cases)):
                want = observe_call(source[call.function], call.kwargs, [], False)
                for name, function in trivial.items():
                    if name == CENTRED and not _normalized(dict(call.kwargs)) and "raised" not in want:
                        continue
                    got = accept_observation(observe_call(function, call.kwargs, [], False))
                    outcome = judge_case(call.function, call.kwargs, got, want, check.compare, tolerances)
                    if outcome.verdict == Verdict.PASS:
                        passes.append(f"seed {seed}, {check.id}, {name}: {call.label}")
    assert not passes, "\n".join(passes)


def test_no_trivial_answer_matches_any_t3_series(problem: Problem) -> None:
    seed = problem.grading_seeds[0]
    want, _ = reference_series(problem, seed)
    matches = []
    for name, function in _trivial_functions().items():
        got, _, failures = run_series(problem, seed, {PROBLEM: function})
        assert not failures, (name, failures)
        for check in problem.spec.checks:
            if check.tier != "T3" or (name == CENTRED and check.id == "scale_centred"):
                continue
            tol = Tolerance(rtol=check.rtol, atol=check.atol)
            matches += [f"{name}: {s}" for s in check.series if compare_tensors(s, got[s], want[s], tol) is None]
    assert not matches, matches


# ---------------------------------------------------------------- end to end, through the CLI


def test_correct_sample_scores_full_marks(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["ada_segments"]
    lost = {c["id"]: c["message"] for c in checks_of(report).values() if c["verdict"] != Verdict.PASS}
    assert report["score"] == report["max_score"] == 100, lost
    assert sorted(report["artifacts"]) == ["scale_centred.png", "scale_normalized.png"]


def test_typical_mistake_loses_the_constant_group_points(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["ben_torch_std"]
    checks = checks_of(report)
    assert report["score"] < 100
    assert checks["constant_groups"]["verdict"] == Verdict.FAIL
    assert checks["single_sample_groups"]["verdict"] == Verdict.FAIL
    assert checks["scale_normalized"]["verdict"] == Verdict.PASS  # 0/1 groups hide the mistake in the toy


@pytest.mark.parametrize("name", sorted(set(TRIVIAL_SOURCES) - {CENTRED}))
def test_trivial_answer_earns_nothing_beyond_t0(graded: dict[str, dict[str, Any]], name: str) -> None:
    report = graded[name]
    assert report["status"] == Status.GRADED
    passed = [c["id"] for t in report["tiers"] if t["tier"] != "T0" for c in t["checks"] if c["score"] > 0]
    scores = tier_scores(report)
    assert (scores["T1"], scores["T2"], scores["T3"]) == (0, 0, 0), f"{name} earns points in {passed}"


def test_centring_alone_earns_nothing_where_normalization_is_due(graded: dict[str, dict[str, Any]]) -> None:
    checks = checks_of(graded[CENTRED])
    normalized_only = ["oracle_std", "oracle_std_unbiased", "unbiased_ddof", "eps_placement", "default_arguments",
                       "scale_normalized"]
    assert {name: checks[name]["score"] for name in normalized_only} == dict.fromkeys(normalized_only, 0)


def test_validate_passes(run_cli) -> None:
    """The reference earns full marks on every hidden seed; each known-wrong file fails exactly as declared."""
    result = run_cli("validate", "--problem", PROBLEM, "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{PROBLEM}: valid" in result.stdout


def test_hidden_seeds_stay_out_of_learner_files(problem: Problem) -> None:
    learner_text = "".join(p.read_text() for p in Path(problem.problem_dir).glob("*") if p.is_file())
    for seed in problem.grading_seeds:
        assert str(seed) not in learner_text, seed
