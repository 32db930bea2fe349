"""The toy experiment's driver: seeded parts on the trusted side, proxies that carry gradients, failures per part."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.judge.accept import MAX_SERIES_POINTS
from grader.judge.cases import Call
from grader.judge.experiment import ToyMisuse, run_experiment
from grader.model.problem import Problem, list_problems
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call


def _toy(*parts: Any) -> types.ModuleType:
    module = types.ModuleType("toy")
    module.PARTS = parts  # type: ignore[attr-defined]
    return module


def _in_process(functions: dict[str, Any]):
    def observe(call: Call, timeout_s: float) -> dict[str, Any]:
        return observe_call(functions[call.function], call.kwargs, list(call.requires_grad), call.backward)

    return observe


def test_a_proxied_loss_carries_its_gradient_into_the_drivers_graph() -> None:
    def loss(x, w):
        return (x.exp() * w).sum()

    def part(rng, loss):
        theta = torch.randn(3, generator=rng, dtype=torch.float64, requires_grad=True)
        x = theta * 2  # a non-leaf: the gradient must flow through it back to theta
        value = loss(x=x, w=torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
        value.backward()
        expected = 2 * x.detach().exp() * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
        return {"grad": theta.grad, "expected": expected, "value": value.detach().reshape(1)}

    (result,) = run_experiment(_toy(part), ["loss"], _in_process({"loss": loss}), 7, 10.0, 10.0)
    assert result.failure is None
    torch.testing.assert_close(result.series["grad"], result.series["expected"])


def _gates(logits):
    """Non-scalar, its sum constant: the sum's gradient is 0 whatever the rule, a cotangent's is not."""
    return torch.softmax(logits, dim=-1), logits.argmax(dim=-1)


def _pair_part(cotangent_of):
    def part(rng, gates):
        theta = torch.randn(3, 4, generator=rng, dtype=torch.float64, requires_grad=True)
        weights = torch.randn(3, 4, generator=rng, dtype=torch.float64)
        pairing, (values, _) = gates.paired(cotangent_of(weights), logits=theta * 1.0)
        (grad,) = torch.autograd.grad(pairing, theta)
        probs = torch.softmax(theta.detach(), dim=-1)
        expected = probs * (weights - (probs * weights).sum(dim=-1, keepdim=True))
        return {"grad": grad.reshape(-1), "expected": expected.reshape(-1), "values": values.reshape(-1)}

    return part


def test_a_paired_call_carries_the_functions_own_vector_jacobian_product() -> None:
    (result,) = run_experiment(_toy(_pair_part(lambda w: w)), ["gates"], _in_process({"gates": _gates}), 3, 10.0, 10.0)
    assert result.failure is None
    assert float(result.series["expected"].abs().max()) > 0.01
    torch.testing.assert_close(result.series["grad"], result.series["expected"])


@pytest.mark.parametrize(
    ("gates", "message"),
    [
        (lambda logits: (torch.softmax(logits.detach(), dim=-1), None), "detached from the graph"),
        (lambda logits: (torch.softmax(logits, dim=-1)[:, :2], None), "returned shape [3, 2], the toy expects [3, 4]"),
        (lambda logits: (logits.argmax(dim=-1, keepdim=True).expand(3, 4), None), "no floating tensor"),
    ],
)
def test_a_paired_call_fails_an_output_it_cannot_differentiate(gates, message: str) -> None:
    (result,) = run_experiment(_toy(_pair_part(lambda w: w)), ["gates"], _in_process({"gates": gates}), 3, 10.0, 10.0)
    assert result.failure is not None and result.failure.verdict == Verdict.FAIL
    assert message in result.failure.message


def test_a_paired_gradient_sees_values_right_and_graph_wrong() -> None:
    def straight_through(logits):
        top = torch.softmax(logits.masked_fill(logits < logits.median(dim=-1, keepdim=True).values, -math.inf), -1)
        dense = torch.softmax(logits, dim=-1)
        return top.detach() + (dense - dense.detach()), None

    def honest(logits):
        return torch.softmax(
            logits.masked_fill(logits < logits.median(dim=-1, keepdim=True).values, -math.inf), -1
        ), None

    def grad_of(gates):
        (result,) = run_experiment(
            _toy(_pair_part(lambda w: w)), ["gates"], _in_process({"gates": gates}), 3, 10.0, 10.0
        )
        assert result.failure is None
        return result.series

    wrong, right = grad_of(straight_through), grad_of(honest)
    torch.testing.assert_close(wrong["values"], right["values"])
    assert float((wrong["grad"] - right["grad"]).abs().max()) > 0.01


@pytest.mark.parametrize(
    "cotangent_of",
    [lambda w: w.long(), lambda w: w.masked_fill(w > 0, math.inf), lambda w: w.tolist()],
)
def test_a_toy_that_sends_a_bad_cotangent_is_the_judges_error(cotangent_of) -> None:
    with pytest.raises(ToyMisuse):
        run_experiment(_toy(_pair_part(cotangent_of)), ["gates"], _in_process({"gates": _gates}), 3, 10.0, 10.0)


def test_a_part_that_raises_loses_only_its_own_series() -> None:
    def f(x):
        if x.numel() > 3:
            raise ValueError("too long")
        return x * 2

    def short(rng, f):
        return {"short": f(x=torch.rand(3, generator=rng, dtype=torch.float64))}

    def long(rng, f):
        return {"long": f(x=torch.rand(5, generator=rng, dtype=torch.float64))}

    first, second = run_experiment(_toy(short, long), ["f"], _in_process({"f": f}), 1, 10.0, 10.0)
    assert first.failure is None and set(first.series) == {"short"}
    assert second.failure is not None and second.failure.verdict == Verdict.ERROR
    assert "f(x=float64[5]) in the toy's long raised ValueError: too long" in second.failure.message


def test_series_too_long_are_refused() -> None:
    def part(rng, f):
        return {"big": torch.zeros(MAX_SERIES_POINTS + 1, dtype=torch.float64)}

    (result,) = run_experiment(_toy(part), ["f"], _in_process({"f": lambda x: x}), 1, 10.0, 10.0)
    assert result.failure is not None and "more than" in result.failure.message


def _toy_calls(problem: Problem, seed: int) -> list[Call]:
    calls: list[Call] = []
    functions = problem.reference

    def observe(call: Call, timeout_s: float) -> dict[str, Any]:
        calls.append(call)
        return observe_call(functions[call.function], call.kwargs, list(call.requires_grad), call.backward)

    names = [f.name for f in problem.spec.functions]
    for part in run_experiment(problem.experiment_module, names, observe, seed, 60.0, 10.0):
        assert part.failure is None, part.failure.message
    return calls


def _inputs(call: Call) -> list[torch.Tensor]:
    return [v for v in call.kwargs.values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("problem_id", list_problems())
def test_every_toy_call_changes_with_the_seed(problem_id: str) -> None:
    """No call the toy makes under the public seed (whose answers the learner pack and previews show) is made
    under the grading seed: a submission cannot answer the graded toy from a replayed one."""
    problem = Problem(problem_id)
    public, graded = _toy_calls(problem, problem.spec.public_seed), _toy_calls(problem, problem.grading_seeds[0])
    assert public and graded
    seen = {tuple(tuple(t.reshape(-1).tolist()) for t in _inputs(c)) for c in public}
    for call in graded:
        key = tuple(tuple(t.reshape(-1).tolist()) for t in _inputs(call))
        assert key not in seen, f"{problem_id}: {call.label} has the inputs of a public-seed call"


SPLIT = """
import torch

def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    if logp.shape[0] > 100:
        raise RuntimeError("no sweeps today")
    ratio = torch.exp(torch.where(mask.bool(), logp.detach() - rollout_logp, torch.zeros_like(logp)))
    inside = (ratio > 1 - clip_low) & (ratio < 1 + clip_high) & mask.bool()
    return torch.where(inside, ratio, torch.zeros_like(ratio))

def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    valid = mask.bool()
    w = masked_is_weights(logp[:1].expand(1, -1) if False else logp, rollout_logp, mask, clip_low, clip_high)
    adv = torch.where(valid, advantages[:, None].expand_as(logp), torch.zeros_like(logp))
    term = torch.where(valid, w * adv * logp, torch.zeros_like(logp))
    return -term.sum() / valid.sum().clamp(min=1).to(logp.dtype)
"""


def test_a_raising_call_costs_only_the_series_that_need_it(run_cli, tmp_path: Path) -> None:
    file = tmp_path / "split.py"
    file.write_text(SPLIT)
    out = tmp_path / "out"
    result = run_cli("grade", str(file), "--problem", "glm5_offpolicy", "--out", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    checks = {c["id"]: c for tier in json.loads((out / "report.json").read_text())["tiers"] for c in tier["checks"]}
    assert checks["bandit_trajectory"]["verdict"] == "pass"
    assert checks["sweep_weights"]["verdict"] == "error"
    assert "masked_is_weights(logp=float64[401, 1]" in checks["sweep_weights"]["learner_message"]
    assert "RuntimeError: no sweeps today" in checks["sweep_weights"]["learner_message"]
    assert "line " in checks["sweep_weights"]["learner_message"]  # the learner's own frame
