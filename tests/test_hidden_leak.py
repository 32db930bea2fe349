"""A worker that has been sent a hidden case never gets its words into what a learner reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from grader.judge.expectations import Expectations
from grader.model.problem import Problem, list_problems
from grader.model.verdicts import ExitCode

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
