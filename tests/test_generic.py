"""Generic misreadings: each transform makes its one departure and nothing else, the reference with one applied is a
file a learner could have written, and graded, that file is diagnosed as that generic misreading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import problem_named
from in_process import grade_in_process

from grader.judge.expectations import Expectations
from grader.model.generic import CATALOGUE, GenericName, variant_source
from grader.model.problem import list_problems, load_module


def _weights(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked mean that selects padding away, as every statement asks: [B, L] values and a 0-dim mean."""
    if x.dim() != 2:
        raise ValueError("x must be 2-D")
    valid = mask != 0  # [B, L]
    kept = torch.where(valid, x, torch.zeros_like(x))  # [B, L]
    return kept, kept.sum() / valid.sum().clamp(min=1)


def _call(name: str, **kwargs: Any) -> Any:
    return CATALOGUE[name].transform(_weights)(**kwargs)  # type: ignore[index]


def test_padding_multiplied_by_mask_spoils_each_result_covering_a_non_finite_pad() -> None:
    x = torch.tensor([[1.0, float("nan")], [2.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 0], [1, 1]])
    kept, mean = _call("padding_multiplied_by_mask", x=x, mask=mask)
    assert kept[0, 1].isnan() and not kept[1].isnan().any() and kept[0, 0] == 1.0
    assert mean.isnan() and kept.dtype == torch.float64
    finite = _call("padding_multiplied_by_mask", x=x.nan_to_num(), mask=mask)[1]
    assert finite == _weights(x.nan_to_num(), mask)[1]  # finite padding: multiplying and selecting agree


def test_an_empty_selection_gives_a_nan_mean_still_in_the_graph_and_only_there() -> None:
    x = torch.ones(2, 2, dtype=torch.float64, requires_grad=True)
    kept, mean = _call("empty_selection_zero_over_zero", x=x, mask=torch.zeros(2, 2))
    assert mean.isnan() and mean.requires_grad and not kept.isnan().any()
    assert _call("empty_selection_zero_over_zero", x=x, mask=torch.ones(2, 2))[1] == 1.0


def test_input_mutated_overwrites_the_padding_of_the_first_float_input_after_computing() -> None:
    x = torch.tensor([[1.0, 5.0], [2.0, 3.0]], requires_grad=True)
    kept, mean = _call("input_mutated", x=x, mask=torch.tensor([[1, 0], [1, 1]]))
    assert x.tolist() == [[1.0, 0.0], [2.0, 3.0]] and mean.item() == 2.0
    mean.backward()  # the caller's tensor changed behind autograd's back, as `.detach()[...] = 0` does
    assert x.grad is not None


def test_output_dtype_changed_retypes_bool_and_integer_results_only() -> None:
    def route(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x > 0, x.argmax(-1), x

    mask, index, values = CATALOGUE["output_dtype_changed"].transform(route)(x=torch.randn(3, 4))
    assert (mask.dtype, index.dtype, values.dtype) == (torch.uint8, torch.int32, torch.float32)


def test_float32_arithmetic_hands_results_back_in_the_first_floating_inputs_dtype() -> None:
    def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (x * mask).sum()

    lowered = CATALOGUE["float32_arithmetic"].transform(masked_sum)
    x = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    wide = lowered(x=x, mask=torch.ones(3, dtype=torch.float64))
    assert wide.dtype == torch.float64 and float(wide) != float(x.sum()) and abs(float(wide) - 0.6) < 1e-6
    # a float64 mask beside float32 values: computed in float32 and handed back as float32, as a `.float()` port does
    assert lowered(x=x.float(), mask=torch.ones(3, dtype=torch.float64)).dtype == torch.float32


def test_mask_dtype_promoted_widens_floating_results_under_a_wider_floating_mask_only() -> None:
    def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * mask.to(x.dtype)).sum(), mask != 0

    promote = CATALOGUE["mask_dtype_promoted"].transform(masked_sum)
    x = torch.randn(3, 4)
    total, chosen = promote(x=x, mask=torch.ones(3, 4, dtype=torch.float64))
    assert (total.dtype, chosen.dtype) == (torch.float64, torch.bool)
    assert float(total) == float(x.sum())
    for mask in (torch.ones(3, 4, dtype=torch.bool), torch.ones(3, 4, dtype=torch.int64), torch.ones(3, 4)):
        assert promote(x=x, mask=mask)[0].dtype == torch.float32


def test_validation_skipped_returns_where_the_function_refuses() -> None:
    assert _call("validation_skipped", x=torch.ones(3), mask=torch.ones(3)) is None
    assert _call("validation_skipped", x=torch.ones(1, 2), mask=torch.ones(1, 2))[1] == 1.0


def test_a_variant_is_a_file_that_holds_the_generic_misreading(tmp_path: Path) -> None:
    source = '"""A solution."""\n\nimport torch\n\n\ndef f(x, mask):\n    return x.sum()\n'
    path = tmp_path / "variant.py"
    path.write_text(variant_source(source, "input_mutated", ["f"]))
    module = load_module("paperleet_test_variant", path)
    x = torch.ones(2)
    assert module.f(x=x, mask=torch.tensor([1, 0])).item() == 2.0 and x.tolist() == [1.0, 0.0]


def _generic_variants() -> list[tuple[str, str]]:
    """(problem, generic misreading) for each generic misreading a problem declares, with a solution or without."""
    return list(
        dict.fromkeys(
            (problem_id, m.generic)
            for problem_id in list_problems()
            for m in problem_named(problem_id).misconceptions
            if m.generic is not None
        )
    )


GENERIC_VARIANTS = _generic_variants()
_EXPECTATIONS: dict[str, Expectations] = {}


@pytest.mark.parametrize(("problem_id", "generic"), GENERIC_VARIANTS, ids=[f"{p}:{g}" for p, g in GENERIC_VARIANTS])
def test_the_generic_only_variant_of_the_reference_is_diagnosed_as_that_misreading(
    problem_id: str, generic: GenericName, tmp_path: Path
) -> None:
    """The reference with the transform applied, graded as a learner's file, gets as its top diagnosis the
    problem's misreading that is that generic one."""
    problem = problem_named(problem_id)
    declared = {m.id for m in problem.misconceptions if m.generic == generic}
    reference = (problem.reference_dir / "reference.py").read_text()
    path = tmp_path / f"{generic}.py"
    path.write_text(variant_source(reference, generic, [f.name for f in problem.spec.functions]))
    if problem_id not in _EXPECTATIONS:
        _EXPECTATIONS[problem_id] = Expectations(problem, problem.grading_seeds[0])
    (report,) = grade_in_process(problem, [path], _EXPECTATIONS[problem_id])
    found = [(d.id, d.cases_explained, d.cases_failing) for d in report.diagnosis]
    assert report.score < report.max_score, "the variant loses nothing: the misreading does not apply"
    assert found and found[0][0] in declared, found
