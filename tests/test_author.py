"""grader.author: the case-building kit draws as the helpers it replaces did, and its variants keep the answers."""

from __future__ import annotations

import math

import pytest
import torch

from grader.author import (
    MASK_KINDS,
    Call,
    as_one,
    choice,
    dtype_name,
    dtype_variants,
    log_uniform,
    mask_as,
    mask_dtype_variants,
    mutation_variants,
    neighbours,
    partnered,
    randint,
    rejection_sample,
    shuffled,
    strided,
    strided_variants,
    uniform,
)


def _g(seed: int = 7) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_scalars_consume_the_generator_as_torch_draws_do() -> None:
    """A problem moved onto the kit draws the same cases from the same seeds."""
    ours, theirs = _g(), _g()
    assert randint(ours, 2, 5) == int(torch.randint(2, 6, (), generator=theirs))
    assert uniform(ours, -1.0, 3.0) == -1.0 + 4.0 * float(torch.rand((), generator=theirs, dtype=torch.float64))
    assert shuffled(list("abcd"), ours) == [list("abcd")[i] for i in torch.randperm(4, generator=theirs).tolist()]
    assert torch.equal(torch.rand(3, generator=ours), torch.rand(3, generator=theirs))


def test_scalars_stay_in_their_ranges() -> None:
    g = _g()
    assert {randint(g, 0, 2) for _ in range(200)} == {0, 1, 2}
    assert all(1e-3 <= log_uniform(g, 1e-3, 1e3) <= 1e3 for _ in range(100))
    assert {choice(g, ("x", "y")) for _ in range(50)} == {"x", "y"}
    assert dtype_name(torch.bfloat16) == "bfloat16"


def test_rejection_sampling_keeps_the_first_accepted_draw_and_gives_up_loudly() -> None:
    assert rejection_sample(_g(), lambda g: randint(g, 0, 9), lambda v: v > 6) > 6
    with pytest.raises(RuntimeError, match="too rare"):
        rejection_sample(_g(), lambda g: randint(g, 0, 9), lambda v: v > 9, tries=20)


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_a_mask_in_every_dtype_holds_the_same_zeros_and_ones(kind: str) -> None:
    mask = torch.tensor([[True, False, True]])
    converted = mask_as(mask, kind)
    assert str(converted.dtype) == f"torch.{kind}" and converted.tolist() == [[1, 0, 1]]
    with pytest.raises(ValueError, match="mask kind"):
        mask_as(mask, "complex64")


def test_neighbours_are_consecutive_floats_around_the_value() -> None:
    x = torch.tensor(1.0, dtype=torch.float32)
    around = neighbours(x, 2, 1)
    assert around.shape == (4,) and float(around[2]) == 1.0
    assert torch.all(around[1:] > around[:-1])
    assert float(around[3]) == 1.0 + 2.0**-23 and float(around[1]) == 1.0 - 2.0**-24
    assert not math.isclose(float(around[0]), float(around[1]), rel_tol=0, abs_tol=0)


def test_strided_keeps_the_values_in_a_view_that_is_not_contiguous() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    view = strided(x)
    assert torch.equal(view, x) and not view.is_contiguous() and view.storage_offset() == 1
    assert strided(torch.tensor(3.0)).is_contiguous()


def _calls() -> list[Call]:
    x, mask = torch.randn(5, generator=_g(), dtype=torch.float64), torch.tensor([1, 0, 1, 1, 0]).bool()
    return [Call("f", {"x": x, "mask": mask, "scale": 2.0}, "a case")]


def test_variants_change_only_what_they_name() -> None:
    (call,) = _calls()
    (strided_call,) = strided_variants([call], ["x", "scale"])
    assert not strided_call.kwargs["x"].is_contiguous() and torch.equal(strided_call.kwargs["x"], call.kwargs["x"])
    assert strided_call.kwargs["mask"] is call.kwargs["mask"] and strided_call.label == "a case, strided x"
    assert len(mutation_variants([call], ["x"])) == 2
    masks = mask_dtype_variants([call], "mask")
    assert [str(c.kwargs["mask"].dtype).removeprefix("torch.") for c in masks] == list(MASK_KINDS)
    dtypes = dtype_variants([call], ["x", "mask"])
    assert [c.kwargs["x"].dtype for c in dtypes] == [torch.float32, torch.float64, torch.bfloat16, torch.float16]
    assert all(c.kwargs["mask"].dtype == torch.bool for c in dtypes)


def test_calls_grouped_as_one_and_a_partner_judged_on_answering_only() -> None:
    (call,) = _calls()
    assert {c.group for c in as_one([call, call], "convention")} == {"convention"}
    first, partner = partnered(call, call, "empty")
    assert (first.group, partner.group, first.compare) == ("empty", "empty", None)
    assert partner.compare is not None and "values" not in partner.compare
