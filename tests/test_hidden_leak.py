"""A worker that has been sent a hidden case never gets its words into what a learner reads, and no learner-facing
output carries a value of the reference's T3 series at a grading seed."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from grader.judge.compare import compare_series
from grader.judge.expectations import Expectations
from grader.model.problem import Problem, list_problems
from grader.model.spec import Tolerance
from grader.model.verdicts import ExitCode
from grader.outputs.plots import figure_specs, series_tolerances

HOSTILE = Path(__file__).resolve().parent / "hostile" / "leak_hidden_inputs.py"
PROBLEM = "glm5_offpolicy"


def _hidden_fingerprints(problem: Problem) -> set[str]:
    """What the hostile file writes for each hidden call: the first two values of logp, as it formats them."""
    expect = Expectations(problem, problem.grading_seeds[0])
    found = set()
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            if call.hidden and isinstance(call.kwargs.get("logp"), torch.Tensor):
                values = call.kwargs["logp"].reshape(-1)[:2].tolist()
                found.add(" ".join(f"{v:.6f}" for v in values))
    return found


def test_hidden_inputs_never_reach_learner_outputs(run_cli, tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    hidden = _hidden_fingerprints(problem)
    assert len(hidden) > 10
    out, gradescope, junit = tmp_path / "out", tmp_path / "results.json", tmp_path / "junit.xml"
    result = run_cli(
        "grade",
        str(HOSTILE),
        "--problem",
        PROBLEM,
        "--out",
        str(out),
        "--gradescope",
        str(gradescope),
        "--junit",
        str(junit),
    )
    assert result.returncode == ExitCode.OK, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    checks = [c for tier in report["tiers"] for c in tier["checks"]]
    instructor = " ".join(c["message"] for c in checks)
    # the attack did work: instructors see the hidden inputs the file echoed
    assert any(f in instructor for f in hidden)
    learner_texts = {
        "learner_message": " ".join(c["learner_message"] for c in checks),
        "results.json": gradescope.read_text(),
        "junit.xml": junit.read_text(),
    }
    for where, text in learner_texts.items():
        leaked = [f for f in hidden if f in text]
        assert not leaked, f"{where} shows hidden inputs: {leaked[:3]}"


def test_visible_checks_run_before_any_hidden_case() -> None:
    from grader.judge.grading import visible_first

    problem = Problem(PROBLEM)
    expect = Expectations(problem, problem.grading_seeds[0])
    order = visible_first(problem.spec.checks, expect)
    hidden = [any(c.hidden for c in expect.cases(check.cases)) if check.cases else False for check in order]
    assert hidden == sorted(hidden), "a check with hidden cases runs before a visible one"
    assert any(hidden) and not all(hidden)


@pytest.mark.parametrize("problem_id", list_problems())
def test_hidden_labels_carry_no_input_value(problem_id: str) -> None:
    """A hidden case's label reaches the learner: it may name parameters (dtype, shape, flags, scalars passed as
    arguments), never a value held in one of its input tensors."""
    problem = Problem(problem_id)
    expect = Expectations(problem, problem.grading_seeds[0])
    for check in problem.spec.checks:
        for call in expect.cases(check.cases) if check.cases else []:
            if not call.hidden:
                continue
            scalars = {
                float(v) for v in call.kwargs.values() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            values = torch.cat(
                [
                    t.detach().reshape(-1).to(torch.float64)
                    for t in call.kwargs.values()
                    if isinstance(t, torch.Tensor) and t.is_floating_point()
                ]
                or [torch.zeros(0)]
            )
            values = values[torch.isfinite(values)]
            for number in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", call.label):
                x = float(number)
                if not values.numel() or any(abs(x - s) <= 1e-2 * max(1.0, abs(s)) for s in scalars):
                    continue  # a scalar argument, perhaps rounded for the label
                close = torch.isclose(values, torch.tensor(x, dtype=torch.float64), rtol=1e-3, atol=1e-4)
                assert not bool(close.any()), f"{problem_id}: hidden label {call.label!r} shows an input value {number}"


# A known-wrong solution that fails every T3 check on values (it keeps ratios above the upper bound)
T3_WRONG = "high_bound_ignored"


def _t3_names(problem: Problem) -> list[str]:
    return [name for check in problem.spec.checks if check.kind == "experiment" for name in check.series]


def _series_fingerprints(problem: Problem, seed: int) -> set[str]:
    """Each expected value of the T3 series at `seed`, as messages format numbers (repr, %.10g, %.6g), left out
    when it is too short to be told apart from other numbers of a report or when the public seed's series hold it
    too (those are public: the previews show them)."""
    public = Expectations(problem, problem.spec.public_seed).series()
    shared = {x for name in _t3_names(problem) for x in public[name].tolist()}
    found = set()
    for name, value in Expectations(problem, seed).series().items():
        if name not in _t3_names(problem):
            continue
        for x in value.tolist():
            if not math.isfinite(x) or x == round(x) or x in shared:
                continue
            found |= {text for text in (repr(x), f"{x:.10g}", f"{x:.6g}") if len(text.lstrip("-")) >= 6}
    return found


def test_grading_seed_series_never_reach_learner_outputs(run_cli, tmp_path: Path) -> None:
    problem = Problem(PROBLEM)
    seed = problem.grading_seeds[0]
    expected = _series_fingerprints(problem, seed)
    assert len(expected) > 20
    wrong = run_cli("known-wrong", "--problem", PROBLEM, T3_WRONG)
    assert wrong.returncode == ExitCode.OK, wrong.stderr[-2000:]
    submission = Path(wrong.stdout.split()[0])
    submission = submission if submission.is_absolute() else Path(__file__).resolve().parents[1] / submission
    out, gradescope, junit = tmp_path / "out", tmp_path / "results.json", tmp_path / "junit.xml"
    result = run_cli(
        "grade",
        str(submission),
        "--problem",
        PROBLEM,
        "--seed",
        str(seed),
        "--no-follow-through",  # else the misreading charged in T2 credits the T3 cases and no message is written
        "--out",
        str(out),
        "--gradescope",
        str(gradescope),
        "--junit",
        str(junit),
    )
    assert result.returncode == ExitCode.OK, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    t3 = [c for tier in report["tiers"] if tier["tier"] == "T3" for c in tier["checks"]]
    assert t3 and all(c["verdict"] == "fail" for c in t3)
    # instructors keep the evidence: the first failing point's expected value, as compare_tensors writes it
    assert any(f in " ".join(c["message"] for c in t3) for f in expected)
    # the learner still reads which series differs, where, and on which side
    assert all(re.search(r"\w\[\d+\]: (above|below|your value|differs)", c["learner_message"]) for c in t3)
    learner_texts = {
        "learner messages": " ".join(c["learner_message"] for tier in report["tiers"] for c in tier["checks"]),
        "report.html": (out / "report.html").read_text(),
        "results.json": gradescope.read_text(),
        "junit.xml": junit.read_text(),
        "terminal": result.stdout + result.stderr,
    }
    for where, text in learner_texts.items():
        leaked = sorted(f for f in expected if f in text)
        assert not leaked, f"{where} shows expected values of the grading seed's T3 series: {leaked[:3]}"


def test_a_t3_learner_message_carries_no_number_of_the_reference() -> None:
    """What a replaying file would read back: for every way a series can miss (off by a little, far off, NaN, inf,
    a wrong length), the learner's sentence holds no digit but the point's index, its count and the tolerance."""
    want = torch.tensor([0.390625, 0.123456789, -2.5, float("nan"), 7.75], dtype=torch.float64)
    tol = Tolerance(rtol=1e-6, atol=1e-9)
    for index, got in [(0, 0.4), (1, 0.1), (2, float("inf")), (3, 1.0), (4, float("nan"))]:
        mine = want.clone()
        mine[index] = got
        for bound in (tol, None):
            mismatch = compare_series("s", mine, want, bound)
            assert mismatch is not None
            assert repr(float(want[index])) in mismatch.message or index == 3  # the instructor's evidence
            safe = mismatch.learner_message
            assert safe.startswith(f"s[{index}]: ")
            numbers = set(re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", safe))
            allowed = {str(index), "1", "5", "1e-06", "1e-09"}
            assert numbers <= allowed, safe
    short = compare_series("s", want[:3], want, tol)
    assert short is not None and not set(re.findall(r"\d+\.\d+", short.learner_message))


def test_learner_plots_draw_nothing_of_the_grading_seed_reference() -> None:
    """The plot specs (every number the drawing process receives) of a learner's plot at a grading seed hold the
    learner's own values and the public seed's reference, never a value of the grading seed's reference."""
    problem = Problem(PROBLEM)
    reference = Expectations(problem, problem.grading_seeds[0]).series()
    public = Expectations(problem, problem.spec.public_seed).series()
    xs = {plot.x for plot in problem.spec.plots}
    mine = {name: value if name in xs else value + 0.123456789 for name, value in reference.items()}
    first_y = problem.spec.plots[0].lines[0].y
    mine[first_y] = mine[first_y].clone()
    mine[first_y][1] = float("nan")  # a NaN point is marked, never at the reference's value
    specs, failures = figure_specs(
        problem.spec.plots,
        mine,
        Path("/nowhere"),
        "drawn from your functions at the grading seed",
        reference,
        public,
        series_tolerances(problem.spec.checks),
    )
    assert specs and not failures
    assert any(spec.get("marks", {}).get("x") for spec in specs)
    drawn = json.dumps(specs)
    shared = {x for value in public.values() for x in value.tolist()} | {
        x for name in xs for x in reference[name].tolist()
    }
    secret = {repr(x) for name, value in reference.items() if name not in xs for x in value.tolist() if x not in shared}
    secret = {text for text in secret if len(text) >= 6}
    assert len(secret) > 20
    leaked = sorted(text for text in secret if re.search(rf"(?<![\d.]){re.escape(text)}(?!\d)", drawn))
    assert not leaked, f"the plot specs hold values of the grading seed's reference: {leaked[:3]}"
