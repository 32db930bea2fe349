"""Case generators for grpo_advantages: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T3 case holds at least one group whose rewards differ and, when std normalization is on, a group
whose sigma is far from 1, so no trivial answer (zeros, the rewards echoed back, centring without
normalization) matches a case by accident.

Every call draws its rewards from the generator: an edge case keeps its edge (a constant group, a group of one,
a sigma comparable to eps) while the other groups, their order and their levels change from seed to seed, so
the public seed's cases (shipped to learners) never answer a graded one. A call whose right answer does not
depend on its inputs (it must raise, every group has one reward) is grouped with one whose answer does, so a
constant answer earns nothing.

Each check varies its own clause on a neutral background: spread groups whose sigma is far above any eps, no
constant or 0/1 group, eps = 1e-6 or 0, so a convention owned by another check never shows in its cases. The
checks of a convention count their cases as one group: breaking the convention costs its whole weight, once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from grader.author import DTYPES, F32, F64, Call, as_one, dtype_name, randint, shuffled, strided, uniform

FUNCTION = "grpo_advantages"
FLOAT32_GRID = 256  # float32 rewards are multiples of 1/256, so every group sum is exact in any order


def _options(std_normalize: bool | None, eps: float | None, unbiased: bool | None) -> dict[str, object]:
    given = {"std_normalize": std_normalize, "eps": eps, "unbiased": unbiased}
    return {name: value for name, value in given.items() if value is not None}


def advantages_call(rewards: Tensor, group_size: int, std_normalize: bool | None = True, eps: float | None = 1e-6,
                    unbiased: bool | None = False, note: str = "", requires_grad: tuple[str, ...] = (),
                    hidden: bool = False, group: str | None = None) -> Call:
    """One call; an option left None is omitted, so the learner's default applies."""
    options = _options(std_normalize, eps, unbiased)
    kwargs = {"rewards": rewards, "group_size": group_size, **options}
    shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "defaults"
    label = f"{dtype_name(rewards.dtype)} N={rewards.shape[0]} G={group_size}, {shown}" + (f": {note}" if note else "")
    return Call(FUNCTION, kwargs, label, requires_grad=requires_grad, hidden=hidden, group=group)


def _shuffled_groups(rewards: Tensor, group_size: int, g: torch.Generator) -> Tensor:
    """The same groups in an order drawn from `g`."""
    grouped = rewards.reshape(-1, group_size)  # [N / G, G]
    return grouped[torch.randperm(grouped.shape[0], generator=g)].reshape(-1)


# ---------------------------------------------------------------- reward batches


def _spread_group(g: torch.Generator, size: int, dtype: torch.dtype, level: float, scale: float) -> Tensor:
    """One group of `size` rewards around `level`, with spread about `scale` and an exactly representable mean.

    float32 groups sit on a 1/256 grid with deviations summing to exactly zero, so the group mean is `level`
    itself whatever the summation order: the oracle and any correct solution then agree to a few ulps.
    """
    z = torch.randn(size, generator=g, dtype=F64)  # [G]
    z = z - z.mean()
    z = z * (scale / z.square().mean().sqrt().clamp(min=1e-3))  # sigma is `scale`: no group is close to constant
    if dtype == F64:
        return (level + z).to(dtype)
    ticks = torch.round(z * FLOAT32_GRID)
    ticks[-1] -= ticks.sum()  # deviations now sum to zero on the grid
    if bool((ticks == ticks[0]).all()):
        ticks[0] += 1  # keep the group non-constant
        ticks[-1] -= 1
    centre = round(level * FLOAT32_GRID) / FLOAT32_GRID
    return (centre + ticks / FLOAT32_GRID).to(dtype)


def _binary_group(g: torch.Generator, size: int, dtype: torch.dtype, p: float) -> Tensor:
    return (torch.rand(size, generator=g, dtype=F64) < p).to(dtype)


def random_rewards(g: torch.Generator, group_size: int, groups: int, dtype: torch.dtype) -> Tensor:
    """[groups * G] rewards in spread groups, the neutral background: no constant or 0/1 group, every sigma between
    0.25 and 2.7, so eps = 1e-6 moves no advantage beyond float32's tolerance wherever it is placed.

    Group 0 is always spread with sigma well below 1 and group 1 (when present) well above 1.
    """
    parts = []
    for index in range(groups):
        scale = (0.3, 2.5)[index] if index < 2 else math.exp(uniform(g, -1.4, 1.0))
        parts.append(_spread_group(g, group_size, dtype, uniform(g, -2.0, 2.0), scale))
    return torch.cat(parts)


# ---------------------------------------------------------------- T1: random batches against the oracle

RANDOM_SHAPES = [(2, 16), (3, 5), (4, 8), (5, 3), (7, 2), (8, 32), (16, 16), (64, 4), (256, 8)]  # (G, groups)
EPS_CHOICES = (1e-6, 0.0)  # far below every sigma: where eps sits is eps_placement's clause


def _random_calls(g: torch.Generator, std_normalize: bool, unbiased: bool | None) -> list[Call]:
    calls = []
    for index, (group_size, groups) in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            rewards = random_rewards(g, group_size, groups, dtype)
            eps = EPS_CHOICES[(index + (dtype == F64)) % len(EPS_CHOICES)]
            ddof = bool(index % 2) if unbiased is None else unbiased
            calls.append(advantages_call(rewards, group_size, std_normalize, eps, ddof, hidden=True))
    return calls


def random_std(g: torch.Generator) -> list[Call]:
    return _random_calls(g, std_normalize=True, unbiased=False)


def random_std_unbiased(g: torch.Generator) -> list[Call]:
    return _random_calls(g, std_normalize=True, unbiased=True)


def random_centred(g: torch.Generator) -> list[Call]:
    return _random_calls(g, std_normalize=False, unbiased=None)


# ---------------------------------------------------------------- T0 contracts


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, group_size, groups in [(F32, 4, 3), (F64, 8, 2), (torch.bfloat16, 2, 5), (torch.float16, 3, 4)]:
        rewards = random_rewards(g, group_size, groups, F64).to(dtype)
        calls.append(advantages_call(rewards, group_size))
        calls.append(advantages_call(rewards, group_size, std_normalize=False))
    # an empty tensor holds nothing to draw: its call counts with a call whose rewards are drawn
    rewards = random_rewards(g, 4, randint(g, 1, 3), F64)
    calls.append(advantages_call(torch.zeros(0, dtype=F64), 4, note="empty rewards give an empty result",
                                 group="empty rewards"))
    calls.append(advantages_call(rewards, 4, note="the partner of the empty case", group="empty rewards").as_partner())
    return as_one(calls, "contract")


def contract_grad(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        rewards = random_rewards(g, 4, 3, dtype)
        for std_normalize in (True, False):
            calls.append(advantages_call(rewards, 4, std_normalize, note="rewards requires grad",
                                         requires_grad=("rewards",)))
    return calls


def single_sample_groups(g: torch.Generator) -> list[Call]:
    """Each group_size=1 call (all zeros, whatever the rewards) is grouped with the same rewards centred in
    groups of 2, whose answer depends on them."""
    calls = []
    for dtype in DTYPES:
        for index, (std_normalize, eps, unbiased) in enumerate([(True, 1e-6, False), (True, 1e-6, True),
                                                                (True, 0.0, False), (True, 0.0, True),
                                                                (False, 1e-6, True)]):
            rewards = random_rewards(g, 2, randint(g, 2, 4), dtype)
            group = f"{dtype_name(dtype)} {index}"
            calls.append(advantages_call(rewards, 1, std_normalize, eps, unbiased, group=group))
            calls.append(advantages_call(rewards, 2, False, note="the partner of a group_size=1 case",
                                         group=group).as_partner())
    return as_one(shuffled(calls, g), "group_size = 1")


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        rewards = random_rewards(g, 4, 5, dtype)
        calls.append(advantages_call(rewards, 4))
        calls.append(advantages_call(rewards, 4, std_normalize=False))
        calls.append(advantages_call(rewards, 2, unbiased=True))
        calls.append(advantages_call(strided(rewards), 4, note="strided rewards"))  # [N], stride 2
    return calls


# ---------------------------------------------------------------- T2 edge cases

# Constant values whose float mean over G copies is not the value itself for common summation orders
# (torch.mean, sum / G, a running sum), at magnitudes where that error exceeds the comparison's atol.
CONSTANTS = {F64: (100000.1, 98765.4321, 0.7, 0.1, 33000.333333333336), F32: (1000.1, 333.3, 4321.123, 0.7, 0.1)}
CONSTANT_GROUP_SIZES = (3, 6, 7, 10, 12, 16)
# A nearly constant group: a level on a 1/16 grid plus deviations of a few units of 2^-NEARLY_BITS, so every
# sum of a group of up to 16 is exact and its mean, its deviations and their squares are exact in any order
# (a power-of-two group size divides exactly). With eps = 0 its advantages are well defined and of order 1, so
# zeroing it as constant shows, while no placement of eps does.
NEARLY_BITS = {F32: 17, F64: 40}
NEARLY_SIZES = (4, 8, 16)


def _nearly_constant(g: torch.Generator, group_size: int, dtype: torch.dtype) -> Tensor:
    """[G] rewards that differ by a few units of 2^-NEARLY_BITS around a random level: not constant."""
    level = randint(g, -48, 48) / 16
    ticks = torch.randint(-2, 3, (group_size,), generator=g, dtype=torch.int64)
    if bool((ticks == ticks[0]).all()):
        ticks[randint(g, 0, group_size - 1)] += 1
    return (level + ticks.to(F64) * 2.0 ** -NEARLY_BITS[dtype]).to(dtype)


def _with_constants(g: torch.Generator, group_size: int, dtype: torch.dtype) -> Tensor:
    """Two spread groups, one constant group per value in CONSTANTS and one more spread group, in an order
    drawn from `g`."""
    spread = random_rewards(g, group_size, 2, dtype)
    constants = [torch.full((group_size,), v, dtype=dtype) for v in CONSTANTS[dtype]]
    rewards = torch.cat([spread, *constants, _spread_group(g, group_size, dtype, -0.5, 0.8)])
    return _shuffled_groups(rewards, group_size, g)


def constant_groups(g: torch.Generator) -> list[Call]:
    """Constant groups whose rounded mean differs from their value, and nearly constant groups, which are not
    constant: a test of constancy with a tolerance turns them into zeros."""
    calls = []
    for index, group_size in enumerate(CONSTANT_GROUP_SIZES):
        for dtype in DTYPES:
            rewards = _with_constants(g, group_size, dtype)
            note = "five constant groups between spread ones"
            calls.append(advantages_call(rewards, group_size, True, (1e-6, 0.0)[index % 2], bool(index % 3 == 2),
                                         note=note))
            calls.append(advantages_call(rewards, group_size, False, 1e-6, False, note=note))
    for index, group_size in enumerate(NEARLY_SIZES):
        for dtype in DTYPES:
            parts = [_nearly_constant(g, group_size, dtype) for _ in range(3)]
            rewards = _shuffled_groups(torch.cat([*parts, torch.full((group_size,), parts[0][0].item(), dtype=dtype),
                                                  _spread_group(g, group_size, dtype, 0.5, 1.0)]), group_size, g)
            note = f"three groups whose rewards differ by a few multiples of 2^-{NEARLY_BITS[dtype]}, not constant"
            # eps = 0: where eps would sit is eps_placement's clause, and a tiny spread still gives order-1 advantages
            calls.append(advantages_call(rewards, group_size, True, 0.0, bool(index % 2), note=note))
            calls.append(advantages_call(rewards, group_size, False, 0.0, bool(index % 2 == 0), note=note))
    return as_one(calls, "constant groups")


def unbiased_ddof(g: torch.Generator) -> list[Call]:
    calls = []
    for group_size in (2, 3, 4):
        for dtype in DTYPES:
            rewards = random_rewards(g, group_size, 6, dtype)
            for unbiased in (False, True):
                calls.append(advantages_call(rewards, group_size, True, 1e-6, unbiased))
    return as_one(calls, "ddof")


EPS_SCALES = (1e-8, 1e-7, 1e-6, 1e-5, 1e-4)


def eps_placement(g: torch.Generator) -> list[Call]:
    """Groups centred on 0 whose sigma ranges around eps, where eps's placement and its default value change the
    result."""
    calls = []
    for dtype in DTYPES:
        for group_size in (4, 8):
            parts = [torch.randn(group_size, generator=g, dtype=F64) * s for s in EPS_SCALES]
            rewards = torch.cat(parts).to(dtype)
            for eps in (1e-6, 1e-5, 1e-3):
                calls.append(advantages_call(rewards, group_size, True, eps, False, note="sigma from 1e-8 to 1e-4"))
            calls.append(advantages_call(rewards, group_size, True, 1e-6, True, note="sigma from 1e-8 to 1e-4"))
            # eps = 0 is valid: the advantages of a tiny spread are then of order 1, never zeros
            calls.append(advantages_call(rewards, group_size, True, 0.0, bool(group_size % 8),
                                         note="sigma from 1e-8 to 1e-4"))
            # eps omitted: its default, 1e-6, is visible exactly where its placement is
            calls.append(advantages_call(rewards, group_size, True, None, bool(group_size % 8),
                                         note="sigma from 1e-8 to 1e-4, the default eps"))
    return as_one(calls, "eps")


def contiguous_groups(g: torch.Generator) -> list[Call]:
    """Group k sits around 3k, so reading groups with a stride mixes levels and changes every advantage."""
    calls = []
    for dtype in DTYPES:
        for group_size, groups in [(4, 6), (2, 8), (8, 2), (3, 5)]:
            parts = [_spread_group(g, group_size, dtype, 3.0 * k, 0.2 + 0.3 * k) for k in range(groups)]
            rewards = torch.cat(parts)
            calls.append(advantages_call(rewards, group_size, note="group k centred on 3k"))
            calls.append(advantages_call(rewards, group_size, std_normalize=False, note="group k centred on 3k"))
    return as_one(calls, "contiguous groups")


def per_group_statistics(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for group_size in (4, 5, 8):
            levels, scales = (-5.0, 0.0, 10.0, 2.0), (0.1, 1.0, 5.0, 0.4)
            parts = [_spread_group(g, group_size, dtype, lv, s) for lv, s in zip(levels, scales, strict=True)]
            rewards = torch.cat(parts)
            note = "group means -5, 0, 10, 2 and spreads 0.1, 1, 5, 0.4"
            calls.append(advantages_call(rewards, group_size, note=note))
            calls.append(advantages_call(rewards, group_size, std_normalize=False, note=note))
    return as_one(calls, "per-group statistics")


def default_arguments(g: torch.Generator) -> list[Call]:
    """std_normalize and unbiased omitted, eps given: the default eps is eps_placement's, where sigma is near it."""
    calls = []
    for group_size in (3, 4, 8):
        rewards = random_rewards(g, group_size, 5, F64)
        calls.append(advantages_call(rewards, group_size, None, 1e-6, None))
        calls.append(advantages_call(rewards, group_size, True, 1e-6, None))
        calls.append(advantages_call(rewards, group_size, None, 0.0, True))
        calls.append(advantages_call(rewards, group_size, None, 0.0, False))
    f32 = random_rewards(g, 4, 4, F32)
    calls.append(advantages_call(f32, 4, None, 1e-6, None))
    return as_one(calls, "defaults")


def binary_rewards(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for group_size, p in [(8, 0.5), (16, 0.15), (6, 0.85)]:
            groups = 24
            rewards = torch.cat([_binary_group(g, group_size, dtype, p) for _ in range(groups)])
            rewards[:2] = torch.tensor([1.0, 0.0], dtype=dtype)  # group 0 is mixed for sure
            note = f"0/1 rewards with success rate {p}"
            calls.append(advantages_call(rewards, group_size, True, 1e-6, False, note=note))
            calls.append(advantages_call(rewards, group_size, True, 1e-6, True, note=note))
            calls.append(advantages_call(rewards, group_size, False, 1e-6, False, note=note))
    return as_one(calls, "0/1 rewards")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        rewards = random_rewards(g, 4, 6, dtype)
        columns = torch.stack([rewards.flip(0), rewards, rewards * 2], dim=1)  # [N, 3]
        column = columns[:, 1]
        assert not column.is_contiguous()
        calls.append(advantages_call(column, 4, note="a column of an [N, 3] tensor"))
        odd = torch.stack([rewards * 3, rewards], dim=1).reshape(-1)[1::2]  # [N], stride 2, storage offset 1
        assert not odd.is_contiguous()
        calls.append(advantages_call(odd, 4, std_normalize=False, note="every second element of a [2N] tensor"))
    return as_one(calls, "strided rewards")


Change = Callable[[Tensor, int, torch.Generator], dict[str, Any]]  # (rewards, G, g) -> the arguments replaced


def _with(rewards: Tensor, index: int, value: float) -> Tensor:
    changed = rewards.clone()
    changed[index] = value
    return changed


# Complex rewards are left out: the judge accepts real dtypes only, so the call could not be observed at all.
# Each family is the clause of one validation check.
REWARDS_ERRORS: list[tuple[str, Change]] = [
    ("rewards 2-D [N / G, G]", lambda r, n, g: {"rewards": r.reshape(-1, n)}),
    ("rewards 0-dim", lambda r, n, g: {"rewards": r[0], "group_size": 1}),
    ("rewards int64", lambda r, n, g: {"rewards": torch.randint(-5, 6, r.shape, generator=g)}),
    ("rewards bool", lambda r, n, g: {"rewards": r > r.median()}),
    ("rewards holding NaN", lambda r, n, g: {"rewards": _with(r, randint(g, 0, len(r) - 1), math.nan)}),
    ("rewards holding -inf", lambda r, n, g: {"rewards": _with(r, randint(g, 0, len(r) - 1), -math.inf)}),
    ("rewards holding +inf, std_normalize=False",
     lambda r, n, g: {"rewards": _with(r, randint(g, 0, len(r) - 1), math.inf), "std_normalize": False}),
]
GROUP_SIZE_ERRORS: list[tuple[str, Change]] = [
    ("group_size = 0", lambda r, n, g: {"group_size": 0}),
    ("group_size negative", lambda r, n, g: {"group_size": -n}),
    ("group_size a float", lambda r, n, g: {"group_size": float(n)}),
    ("group_size = True (a bool)", lambda r, n, g: {"group_size": True}),
    ("N not a multiple of group_size", lambda r, n, g: {"group_size": len(r) + 1 if len(r) % 2 else len(r) // 2 + 1}),
    ("group_size = 2N", lambda r, n, g: {"group_size": 2 * len(r)}),
]
EPS_ERRORS: list[tuple[str, Change]] = [
    ("eps negative", lambda r, n, g: {"eps": -10 ** -randint(g, 3, 9)}),
    ("eps = NaN", lambda r, n, g: {"eps": math.nan}),
    ("eps = inf", lambda r, n, g: {"eps": math.inf}),
    ("eps negative, std_normalize=False", lambda r, n, g: {"eps": -float(randint(g, 1, 3)), "std_normalize": False}),
]


# A partner call is judged on answering only, so any answer of its length passes, and a public call of another
# length answers none. Each call of a family holds a prime number p of groups, drawn from the family's own third of
# these: N = G * p with G at most 4 is a multiple of no other such prime, so no other family's call and no other
# case has its length, and the whole family is answered from the pack only if every graded partner drew a (G, p)
# some public call of the same family drew.
GROUP_COUNTS = [n for n in range(37, 250) if all(n % d for d in range(2, 16))]
FAMILIES = ("bad rewards", "bad group_size", "bad eps")


def _value_errors(g: torch.Generator, family: str, changes: list[tuple[str, Change]]) -> list[Call]:
    """Each call that must raise beside a valid partner call on the same rewards, in an order drawn from g, all
    scored as one case: raising on everything, or never, earns nothing, and one bad argument let through breaks
    the family's clause."""
    calls = []
    primes = GROUP_COUNTS[FAMILIES.index(family) :: len(FAMILIES)]
    for label, change in changes:
        group_size = randint(g, 2, 4)
        rewards = random_rewards(g, group_size, primes[randint(g, 0, len(primes) - 1)], F32)
        kwargs = {"rewards": rewards, "group_size": group_size, **change(rewards, group_size, g)}
        calls.append(Call(FUNCTION, kwargs, f"{FUNCTION}: {label} (N={len(rewards)}): must raise", group=family))
        eps = (0.0, 1e-6, 1e-3)[randint(g, 0, 2)]
        calls.append(advantages_call(rewards, group_size, bool(randint(g, 0, 1)), eps, bool(randint(g, 0, 1)),
                                     note="valid: must not raise", group=family).as_partner())
    return shuffled(calls, g)


def rewards_errors(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "bad rewards", REWARDS_ERRORS)


def group_size_errors(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "bad group_size", GROUP_SIZE_ERRORS)


def eps_errors(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "bad eps", EPS_ERRORS)


def float64_precision(g: torch.Generator) -> list[Call]:
    """Float64 rewards spread well apart within each group: advantages computed in float64 agree with the
    reference to 1e-9, advantages computed in float32 and cast back do not. eps = 0, so that where eps sits, a
    difference of 1e-6 relative, is charged in eps_placement alone."""
    calls = []
    for std_normalize, unbiased in ((True, False), (True, True), (False, False)):
        rewards = torch.randn(12, generator=g, dtype=F64)  # [N]: no group near constant
        calls.append(advantages_call(rewards, 4, std_normalize, 0.0, unbiased, note="float64 arithmetic"))
    return as_one(calls, "float64")
