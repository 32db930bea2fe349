"""Case generators for routed_gates: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T3 case routes each token to fewer experts than it has (k < E), with the selected experts' gates
different from one another and from what a dense softmax over all experts gives, so no trivial answer (zeros,
a constant, the logits echoed back, a dense softmax with every expert on the route) matches a case by accident.
No graded case has a tie at the k-th largest selection score: logits are drawn again for any token whose k-th
and (k+1)-th scores are closer than MIN_GAP, far above any rounding of float32 arithmetic.

Every call draws its logits from the generator; an edge case keeps its edge (a selected expert whose gate
underflows to an exact zero, scores near the float32 eps of the sigmoid rule, a bias that swaps experts) while
the rest of the batch changes from seed to seed. A call whose right answer is the same whatever its inputs (one
that must raise, one with no token) is grouped with a call whose answer depends on them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from grader.author import as_one
from grader.judge.cases import Call

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
DTYPES = (F32, F64)
FUNCTION = "routed_gates"
MIN_GAP = 1e-3  # smallest gap between the k-th and (k+1)-th selection score of a graded token
OMIT = object()  # an option left out of the call, so the learner's default applies


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high], both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def _shuffled(calls: list[Call], g: torch.Generator) -> list[Call]:
    """The calls in an order drawn from `g`: a call's position says nothing about what it must return."""
    return [calls[i] for i in torch.randperm(len(calls), generator=g).tolist()]


def gates_call(logits: Tensor, top_k: Any, replay: Tensor | None = None, score: object = "softmax",
               bias: Tensor | None = None, scaling: float | None = None, note: str = "",
               requires_grad: tuple[str, ...] = (), hidden: bool = False, group: str | None = None,
               cotangent: Tensor | None = None) -> Call:
    """One call; `score=OMIT` leaves score_function out, and a None option is left out as well. Backward runs
    from the gates' sum when an input requires grad, or from gates * `cotangent` when one is given."""
    kwargs: dict[str, Any] = {"router_logits": logits, "top_k": top_k}
    shown = []
    if replay is not None:
        kwargs["replay_idx"] = replay
        shown.append(f"replay {_name(replay.dtype)}")
    if score is not OMIT:
        kwargs["score_function"] = score
        shown.insert(0, str(score))
    if bias is not None:
        kwargs["expert_bias"] = bias
        shown.append("bias")
    if scaling is not None:
        kwargs["scaling_factor"] = scaling
        shown.append(f"scaling {scaling:.3g}")
    tokens, experts = logits.shape if logits.dim() == 2 else (0, 0)
    label = f"{_name(logits.dtype)} T={tokens} E={experts} k={top_k}, {', '.join(shown) or 'defaults'}"
    backward: bool | Tensor = bool(requires_grad) if cotangent is None else cotangent
    return Call(FUNCTION, kwargs, label + (f": {note}" if note else ""), requires_grad=requires_grad,
                backward=backward, hidden=hidden, group=group)


# ---------------------------------------------------------------- logits, biases and replays


def selection_scores(logits: Tensor, score: object, bias: Tensor | None) -> Tensor:
    """[T, E] float64 scores the top-k ranks: the logits (softmax) or sigmoid(logits) + bias (sigmoid)."""
    scores = logits.to(F64)
    if score == "sigmoid":
        scores = torch.sigmoid(scores) + (0.0 if bias is None else bias.to(F64))
    return scores


def kth_gap(scores: Tensor, top_k: int) -> Tensor:
    """[T] distance between the k-th and (k+1)-th largest score of each token (inf when k = E)."""
    if top_k >= scores.shape[1]:
        return torch.full((scores.shape[0],), math.inf, dtype=F64)
    top = scores.topk(top_k + 1, dim=1).values  # [T, k + 1]
    return top[:, top_k - 1] - top[:, top_k]


def draw_logits(g: torch.Generator, tokens: int, experts: int, top_k: int, dtype: torch.dtype,
                score: object = "softmax", bias: Tensor | None = None, scale: float = 1.5,
                shift: float = 0.0) -> Tensor:
    """[T, E] logits N(shift, scale^2) in `dtype`, drawn again for every token whose k-th score would tie."""
    logits = torch.zeros(tokens, experts, dtype=F64)
    redraw = torch.ones(tokens, dtype=torch.bool)
    for _ in range(200):
        count = int(redraw.sum())
        if count == 0:
            return logits.to(dtype)
        fresh = torch.randn(count, experts, generator=g, dtype=F64) * scale + shift
        logits[redraw] = fresh.to(dtype).to(F64)  # values the dtype holds exactly
        redraw = kth_gap(selection_scores(logits, score, bias), top_k) < MIN_GAP
    raise RuntimeError("could not draw logits without a tie at the k-th score")


def draw_bias(g: torch.Generator, experts: int, scale: float = 0.3) -> Tensor:
    """[E] float32 expert bias, large enough beside sigmoid scores in (0, 1) to change which experts win."""
    return (torch.randn(experts, generator=g, dtype=F64) * scale).to(F32)


def top_sets(scores: Tensor, top_k: int) -> list[set[int]]:
    return [set(row) for row in scores.topk(top_k, dim=1).indices.tolist()]


def draw_replay(g: torch.Generator, tokens: int, experts: int, top_k: int, avoid: Tensor | None = None,
                dtype: torch.dtype = torch.int64) -> Tensor:
    """[T, k] distinct experts per row in a random order; with `avoid` (the scores of the current top-k), every
    row holds at least one expert outside the current top-k, so a replay that is ignored shows."""
    current = top_sets(avoid, top_k) if avoid is not None else [set()] * tokens
    rows = []
    for t in range(tokens):
        for _ in range(100):
            row = torch.randperm(experts, generator=g)[:top_k].tolist()
            if avoid is None or set(row) != current[t]:
                break
        rows.append(row)
    return torch.tensor(rows, dtype=torch.int64).reshape(tokens, top_k).to(dtype)


def _pick_k(g: torch.Generator, experts: int) -> int:
    """k in [1, min(E - 1, 8)]: a dense softmax over all experts is right only when k = E."""
    return _randint(g, 1, min(experts - 1, 8))


# ---------------------------------------------------------------- T1: random batches against the oracle

RANDOM_SHAPES = [(1, 4), (3, 8), (5, 6), (8, 16), (16, 8), (7, 5), (32, 64), (64, 32), (128, 16)]  # (T, E)


# Each family moves one clause on a neutral background: float32 and float64 logits, int64 replays, sigmoid with
# k > 1, no bias and no scaling unless the family is about them. bfloat16, int32 replays and the sigmoid's k = 1
# are checks of their own in T2, so a misreading of one of them costs its own clause, never a whole family here.


def _pick_sigmoid_k(g: torch.Generator, experts: int) -> int:
    """k in [2, min(E - 1, 8)]: the normalized sigmoid rule (k = 1 is sigmoid_single_expert's)."""
    return _randint(g, 2, min(experts - 1, 8))


def random_softmax(g: torch.Generator) -> list[Call]:
    calls = []
    for tokens, experts in RANDOM_SHAPES:
        for dtype in DTYPES:
            top_k = _pick_k(g, experts)
            logits = draw_logits(g, tokens, experts, top_k, dtype, scale=_uniform(g, 0.5, 3.0))
            calls.append(gates_call(logits, top_k, hidden=True))
    return calls


def random_sigmoid(g: torch.Generator) -> list[Call]:
    calls = []
    for tokens, experts in RANDOM_SHAPES:
        for dtype in DTYPES:
            top_k = _pick_sigmoid_k(g, experts)
            logits = draw_logits(g, tokens, experts, top_k, dtype, "sigmoid", None, _uniform(g, 0.5, 3.0))
            calls.append(gates_call(logits, top_k, score="sigmoid", hidden=True))
    return calls


def random_replay(g: torch.Generator) -> list[Call]:
    calls = []
    for index, (tokens, experts) in enumerate(RANDOM_SHAPES):
        for score in ("softmax", "sigmoid"):
            dtype = DTYPES[(index + (score == "sigmoid")) % 2]
            top_k = _pick_k(g, experts) if score == "softmax" else _pick_sigmoid_k(g, experts)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score, None, _uniform(g, 0.5, 3.0))
            replay = draw_replay(g, tokens, experts, top_k)
            calls.append(gates_call(logits, top_k, replay, score, hidden=True))
    return calls


def random_bias(g: torch.Generator) -> list[Call]:
    """Sigmoid with an expert bias, which ranks the experts and never enters the gates."""
    calls = []
    for tokens, experts in RANDOM_SHAPES:
        for dtype in DTYPES:
            top_k = _pick_sigmoid_k(g, experts)
            bias = draw_bias(g, experts, _uniform(g, 0.05, 0.5))
            logits = draw_logits(g, tokens, experts, top_k, dtype, "sigmoid", bias, _uniform(g, 0.5, 3.0))
            calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias, hidden=True))
    return as_one(calls, "bias")


def random_scaling(g: torch.Generator) -> list[Call]:
    """Both rules with a scaling factor, which multiplies the normalized gates."""
    calls = []
    for index, (tokens, experts) in enumerate(RANDOM_SHAPES):
        for score in ("softmax", "sigmoid"):
            dtype = DTYPES[(index + (score == "sigmoid")) % 2]
            top_k = _pick_k(g, experts) if score == "softmax" else _pick_sigmoid_k(g, experts)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score, None, _uniform(g, 0.5, 3.0))
            calls.append(gates_call(logits, top_k, score=score, scaling=round(_uniform(g, 0.25, 4.0), 3), hidden=True))
    return calls


# ---------------------------------------------------------------- T0 contracts


def _small(g: torch.Generator, dtype: torch.dtype, score: str = "softmax", with_bias: bool = False,
           tokens: int | None = None, experts: int | None = None, top_k: int | None = None,
           ) -> tuple[Tensor, int, Tensor | None]:
    tokens = _randint(g, 3, 6) if tokens is None else tokens
    experts = _randint(g, 5, 8) if experts is None else experts
    top_k = _randint(g, 2, 3) if top_k is None else top_k
    bias = draw_bias(g, experts) if with_bias else None
    return draw_logits(g, tokens, experts, top_k, dtype, score, bias), top_k, bias


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in (F32, F64, BF16, F16):
        logits, top_k, _ = _small(g, dtype)
        calls.append(gates_call(logits, top_k))
        logits, top_k, bias = _small(g, dtype, "sigmoid", with_bias=True)
        calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias))
        replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k)
        calls.append(gates_call(logits, top_k, replay, "sigmoid", scaling=2.5))
    return calls


def contract_grad(g: torch.Generator) -> list[Call]:
    """router_logits requires grad: the gates must come back connected to it."""
    calls = []
    for dtype in DTYPES:
        logits, top_k, _ = _small(g, dtype)
        calls.append(gates_call(logits, top_k, requires_grad=("router_logits",)))
        replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k, avoid=logits)
        calls.append(gates_call(logits, top_k, replay, requires_grad=("router_logits",)))
        logits, top_k, bias = _small(g, dtype, "sigmoid", with_bias=True)
        calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias, requires_grad=("router_logits",)))
        logits, top_k, _ = _small(g, dtype, "sigmoid", top_k=1)
        calls.append(gates_call(logits, 1, score="sigmoid", scaling=1.5, requires_grad=("router_logits",)))
    return calls


def empty_tokens(g: torch.Generator) -> list[Call]:
    """T = 0 gives [0, E] results; each such call counts with a call on drawn logits of the same width."""
    calls = []
    for index, (dtype, score) in enumerate([(F32, "softmax"), (F64, "sigmoid"), (F32, "sigmoid"), (F64, "softmax")]):
        experts = _randint(g, 4, 9)
        top_k = _randint(g, 1, 3)
        bias = draw_bias(g, experts) if score == "sigmoid" else None
        replay = torch.zeros(0, top_k, dtype=torch.int64) if index % 2 else None
        calls.append(gates_call(torch.zeros(0, experts, dtype=dtype), top_k, replay, score, bias,
                                note="no token"))
        logits = draw_logits(g, _randint(g, 2, 5), experts, top_k, dtype, score, bias)
        partner = gates_call(logits, top_k, None, score, bias, note="the partner of a call with no token")
        calls.append(partner.as_partner())
    return as_one(calls, "empty tokens")


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logits, top_k, _ = _small(g, dtype)
        calls.append(gates_call(logits, top_k, scaling=2.0))
        replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k, avoid=logits)
        calls.append(gates_call(logits, top_k, replay))
        logits, top_k, bias = _small(g, dtype, "sigmoid", with_bias=True)
        calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias))
        replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k)
        calls.append(gates_call(logits, top_k, replay, "sigmoid", bias))
        strided = torch.stack([logits, logits], dim=2)[:, :, 0]  # [T, E], stride 2
        calls.append(gates_call(strided, top_k, score="sigmoid", note="strided logits"))
    return as_one(calls, "mutation")


# ---------------------------------------------------------------- T2 edge cases


def renormalized_softmax(g: torch.Generator) -> list[Call]:
    """Softmax gates over the selected experts only: the unselected ones hold much of a full softmax's mass."""
    calls = []
    for dtype in DTYPES:
        for experts, top_k in [(4, 2), (8, 1), (8, 3), (16, 4), (6, 5)]:
            logits = draw_logits(g, _randint(g, 4, 9), experts, top_k, dtype, scale=_uniform(g, 0.4, 1.2))
            calls.append(gates_call(logits, top_k, note="the unselected experts hold much of the mass"))
    return calls


def replay_overrides_topk(g: torch.Generator) -> list[Call]:
    """Every replayed row holds an expert outside the current top-k, in a random order."""
    calls = []
    for dtype in DTYPES:
        for score, experts, top_k in [("softmax", 6, 2), ("softmax", 8, 3), ("softmax", 5, 1),
                                      ("sigmoid", 8, 2), ("sigmoid", 12, 4), ("sigmoid", 6, 3)]:
            tokens = _randint(g, 4, 10)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score)
            replay = draw_replay(g, tokens, experts, top_k, avoid=selection_scores(logits, score, None))
            calls.append(gates_call(logits, top_k, replay, score, note="each row replays an expert outside the top-k"))
    return as_one(calls, "replay overrides top-k")


def replay_index_dtypes(g: torch.Generator) -> list[Call]:
    """int32 and int64 replays of the same experts, each row in a random order."""
    calls = []
    for dtype in DTYPES:
        for score in ("softmax", "sigmoid"):
            experts, top_k = _randint(g, 5, 10), _randint(g, 2, 4)
            tokens = _randint(g, 3, 8)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score)
            replay = draw_replay(g, tokens, experts, top_k, avoid=selection_scores(logits, score, None))
            for index_dtype in (torch.int32, torch.int64):
                calls.append(gates_call(logits, top_k, replay.to(index_dtype), score))
    return as_one(calls, "replay index dtypes")


def sigmoid_normalization(g: torch.Generator) -> list[Call]:
    """k > 1: each selected sigmoid is divided by the sum over the selected experts, never over all E."""
    calls = []
    for dtype in DTYPES:
        for experts, top_k in [(8, 2), (16, 4), (32, 6), (64, 8), (6, 5)]:
            logits = draw_logits(g, _randint(g, 3, 8), experts, top_k, dtype, "sigmoid", shift=_uniform(g, -1, 1))
            calls.append(gates_call(logits, top_k, score="sigmoid"))
    return calls


def sigmoid_single_expert(g: torch.Generator) -> list[Call]:
    """k = 1: the gate is the sigmoid of the selected logit itself (times any scaling), never renormalized to 1."""
    calls = []
    for dtype in DTYPES:
        for index in range(4):
            experts = _randint(g, 4, 12)
            # logits around -0.8 keep every gate well away from 1
            logits = draw_logits(g, _randint(g, 4, 9), experts, 1, dtype, "sigmoid", scale=0.8, shift=-0.8)
            replay = draw_replay(g, logits.shape[0], experts, 1) if index % 2 else None
            scaling = round(_uniform(g, 0.5, 3.0), 3) if index >= 2 else None
            calls.append(gates_call(logits, 1, replay, "sigmoid", scaling=scaling))
    return calls


def _bias_that_swaps(g: torch.Generator, tokens: int, experts: int, top_k: int, dtype: torch.dtype,
                     ) -> tuple[Tensor, Tensor]:
    """(logits, bias) where the bias changes the top-k of most tokens, and ranking by logits + bias (instead
    of sigmoid(logits) + bias) changes it for some."""
    for _ in range(100):
        bias = draw_bias(g, experts, scale=_uniform(g, 0.2, 0.5))
        logits = draw_logits(g, tokens, experts, top_k, dtype, "sigmoid", bias, scale=2.0)
        scores = selection_scores(logits, "sigmoid", bias)
        without = top_sets(selection_scores(logits, "sigmoid", None), top_k)
        on_logits = top_sets(logits.to(F64) + bias.to(F64), top_k)
        chosen = top_sets(scores, top_k)
        swapped = sum(a != b for a, b in zip(chosen, without, strict=True))
        moved = sum(a != b for a, b in zip(chosen, on_logits, strict=True))
        if 2 * swapped >= tokens and moved >= 1:
            return logits, bias
    raise RuntimeError("could not draw a bias that swaps experts")


def expert_bias_selection(g: torch.Generator) -> list[Call]:
    """The bias is added to sigmoid(logits) to rank the experts, and swaps the experts of most tokens."""
    calls = []
    for dtype in DTYPES:
        for experts, top_k in [(6, 2), (8, 2), (12, 3), (16, 4)]:
            logits, bias = _bias_that_swaps(g, _randint(g, 6, 12), experts, top_k, dtype)
            calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias, note="the bias swaps experts"))
    return calls


def expert_bias_gates(g: torch.Generator) -> list[Call]:
    """The gates of the experts the bias selected hold no bias: sigmoid(logits) alone, normalized or not."""
    calls = []
    for dtype in DTYPES:
        for experts, top_k in [(6, 2), (8, 3), (12, 4)]:
            bias = (draw_bias(g, experts, 0.2) + _uniform(g, 0.3, 1.0)).to(F32)  # mostly positive
            logits = draw_logits(g, _randint(g, 4, 9), experts, top_k, dtype, "sigmoid", bias, scale=1.0)
            calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias))
        logits, bias = _bias_that_swaps(g, _randint(g, 4, 9), 10, 3, dtype)
        calls.append(gates_call(logits, 3, score="sigmoid", bias=bias, note="the bias swaps experts"))
    return calls


def replay_ignores_bias(g: torch.Generator) -> list[Call]:
    """Under replay the bias is still validated but plays no part: not in the selection, not in the gates."""
    calls = []
    for dtype in DTYPES:
        for experts, top_k in [(6, 2), (8, 2), (12, 3)]:
            tokens = _randint(g, 4, 9)
            logits, bias = _bias_that_swaps(g, tokens, experts, top_k, dtype)
            replay = draw_replay(g, tokens, experts, top_k, avoid=selection_scores(logits, "sigmoid", bias))
            calls.append(gates_call(logits, top_k, replay, "sigmoid", bias, note="a large bias beside a replay"))
    return calls


def scaling_after_normalization(g: torch.Generator) -> list[Call]:
    """scaling_factor multiplies the normalized gates: they then sum to the factor, not to 1."""
    calls = []
    for dtype in DTYPES:
        for score, top_k in [("softmax", 2), ("softmax", 3), ("sigmoid", 2), ("sigmoid", 4), ("sigmoid", 3)]:
            experts = _randint(g, top_k + 2, 12)
            tokens = _randint(g, 3, 8)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score)
            replay = draw_replay(g, tokens, experts, top_k) if score == "softmax" and top_k == 3 else None
            calls.append(gates_call(logits, top_k, replay, score, scaling=round(_uniform(g, 1.5, 4.0), 3)))
    return calls


def sigmoid_epsilon(g: torch.Generator) -> list[Call]:
    """Every selected sigmoid is below about 1e-19, so the 1e-20 of the denominator is of the same order."""
    calls = []
    for dtype in DTYPES:
        for top_k, replayed in [(2, False), (3, False), (2, True), (4, True)]:
            tokens, experts = _randint(g, 3, 7), _randint(g, top_k + 2, 10)
            if replayed:
                logits = draw_logits(g, tokens, experts, top_k, dtype, "sigmoid")
                replay = draw_replay(g, tokens, experts, top_k)
                low = (torch.rand(tokens, top_k, generator=g, dtype=F64) * 8 - 51).to(dtype)  # sigmoid straddles 1e-20
                logits = logits.scatter(1, replay, low)
                calls.append(gates_call(logits, top_k, replay, "sigmoid", note="replayed logits in [-51, -43]"))
            else:
                # ranked in logit space: these sigmoids are too small for a gap in score space
                logits = draw_logits(g, tokens, experts, top_k, dtype, scale=2.5, shift=-48.0)
                # far below the top-k as well, so the sigmoids of the selection stay below about 1e-19
                logits = logits.clamp(min=-60.0, max=-44.0)
                logits = _untie_in_logit_space(g, logits, top_k)
                calls.append(gates_call(logits, top_k, score="sigmoid", note="every logit in [-60, -44]"))
    return calls


def _untie_in_logit_space(g: torch.Generator, logits: Tensor, top_k: int) -> Tensor:
    """Spread the logits of any token whose k-th and (k+1)-th logits are closer than 0.5 (sigmoid is monotone,
    and these sigmoids are too small for a score gap: their ranking is the logits')."""
    values = logits.to(F64).clone()
    for t in range(values.shape[0]):
        for _ in range(100):
            if float(kth_gap(values[t:t + 1], top_k)[0]) >= 0.5:
                break
            values[t] = (torch.rand(values.shape[1], generator=g, dtype=F64) * 16 - 60).to(logits.dtype).to(F64)
    return values.to(logits.dtype)


def zero_gates_on_route(g: torch.Generator) -> list[Call]:
    """Replayed experts whose gate underflows to exactly 0 stay on the route (routing_map is the selection).

    Replay only: without one, an expert whose gate underflows ranks below others whose scores underflow too,
    and a top-k over rounded probabilities would see ties that the logits do not have."""
    calls = []
    for dtype in DTYPES:
        far = 200.0 if dtype == F32 else 900.0  # exp(-far) and sigmoid(-far) are 0 in the dtype
        for score, top_k in [("softmax", 2), ("softmax", 3), ("sigmoid", 2), ("sigmoid", 3), ("sigmoid", 4)]:
            tokens, experts = _randint(g, 4, 8), _randint(g, top_k + 2, 9)
            logits = draw_logits(g, tokens, experts, top_k, dtype, score)
            replay = draw_replay(g, tokens, experts, top_k)
            sunk = torch.rand(tokens, generator=g) < 0.5  # tokens whose first replayed expert lies far below
            sunk[_randint(g, 0, tokens - 1)] = True
            depth = (-far - 50 * torch.rand(tokens, 1, generator=g, dtype=F64)).to(dtype)  # [T, 1]
            first = torch.zeros_like(logits, dtype=torch.bool).scatter(1, replay[:, :1], True)  # [T, E]
            logits = torch.where(sunk[:, None] & first, depth, logits)
            calls.append(gates_call(logits, top_k, replay, score, note="some replayed logits lie far below the rest"))
    return calls


def _moved(exact: Tensor, rounded: Tensor, top_k: int) -> Tensor:
    """[N] whether the top-k set of each row differs between the two scores."""
    first = exact.topk(top_k, dim=1).indices.sort(dim=1).values
    return (first != rounded.topk(top_k, dim=1).indices.sort(dim=1).values).any(dim=1)


def _bf16_swaps(g: torch.Generator, experts: int, top_k: int, wanted: int) -> tuple[Tensor, Tensor]:
    """(bfloat16 logits [T, E], float32 bias [E]) whose top-k of sigmoid + bias changes when the sigmoid is
    rounded to bfloat16 (alone, or with the bias and the sum) for `wanted` tokens; the float32 gap stays above
    1e-4."""
    bias = draw_bias(g, experts, 0.05)
    bias64 = bias.to(F64)
    rows: list[Tensor] = []
    for _ in range(100):
        candidates = (torch.randn(4096, experts, generator=g, dtype=F64) * 1.5).to(BF16)
        exact = torch.sigmoid(candidates.to(F32)).to(F64) + bias64  # [N, E], as float32 arithmetic gives
        chosen = kth_gap(exact, top_k) > 1e-4
        # two ways to stay in bfloat16: the sigmoid rounded before a float32 bias is added, or everything rounded
        for rounded in (torch.sigmoid(candidates).to(F64) + bias64,
                        (torch.sigmoid(candidates) + bias.to(BF16)).to(F64)):
            chosen &= _moved(exact, rounded, top_k) & (kth_gap(rounded, top_k) > 0)
        rows += list(candidates[chosen])
        if len(rows) >= wanted:
            return torch.stack(rows[:wanted]), bias
    raise RuntimeError("could not draw bfloat16 logits that rounding moves")


def bf16_upcast(g: torch.Generator) -> list[Call]:
    """bfloat16 logits: scores and gates computed in float32 at least, the gates rounded once at the end.

    In the sigmoid cases every other token sits where rounding the sigmoid to bfloat16 before adding the
    bias swaps an expert at the k-th place."""
    calls = []
    for experts, top_k in [(6, 2), (8, 2), (12, 3)]:
        swapping, bias = _bf16_swaps(g, experts, top_k, 4)
        plain = draw_logits(g, 4, experts, top_k, BF16, "sigmoid", bias)
        logits = torch.cat([swapping, plain])[torch.randperm(8, generator=g)]
        calls.append(gates_call(logits, top_k, score="sigmoid", bias=bias, note="float32 bias"))
    for top_k in (2, 4):
        logits = draw_logits(g, _randint(g, 4, 8), _randint(g, top_k + 2, 12), top_k, BF16, scale=2.0)
        calls.append(gates_call(logits, top_k))
    return calls


def gate_gradients(g: torch.Generator) -> list[Call]:
    """Backward of gates * a random cotangent, which a normalized rule does not cancel (the sum of its gates is
    constant): a graph cut from the logits, or one that reaches experts off the route, shows there; the gates'
    sum still backpropagates to a zero yet connected gradient. Every call but the eps regime's counts together,
    so a gradient misread anywhere costs the clause, not a share of its cases. The bias's gradient is
    bias_gradient's."""
    calls = []
    grad, group = ("router_logits",), "gradients"
    for dtype in DTYPES:
        for score in ("softmax", "sigmoid"):
            logits, top_k, _ = _small(g, dtype, score)
            cotangent = torch.randn(logits.shape, generator=g, dtype=F64).to(dtype)  # [T, E]
            calls.append(gates_call(logits, top_k, score=score, requires_grad=grad, cotangent=cotangent,
                                    note="backward of gates * a random cotangent", group=group))
            replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k, avoid=logits)
            cotangent = torch.randn(logits.shape, generator=g, dtype=F64).to(dtype)
            calls.append(gates_call(logits, top_k, replay, score, requires_grad=grad, cotangent=cotangent,
                                    note="backward of gates * a random cotangent", group=group))
        logits, top_k, _ = _small(g, dtype, "sigmoid")
        calls.append(gates_call(logits, top_k, score="sigmoid", requires_grad=grad, note="backward of the gates' sum",
                                group=group))
    # float64 only: in float32 the squared denominator of the eps regime is subnormal
    tokens, experts = _randint(g, 3, 6), _randint(g, 5, 8)
    logits = draw_logits(g, tokens, experts, 2, F64, "sigmoid")
    replay = draw_replay(g, tokens, experts, 2)
    logits = logits.scatter(1, replay, torch.rand(tokens, 2, generator=g, dtype=F64) * 6 - 50)
    calls.append(gates_call(logits, 2, replay, "sigmoid", requires_grad=grad, note="replayed logits in [-50, -44]"))
    return calls


def bias_gradient(g: torch.Generator) -> list[Call]:
    """expert_bias requires grad and receives none. The bias is zeros, so that it moves no expert and no gate:
    only a bias that enters the gates' graph shows, by the gradient it receives. k = 1, whose gate is the raw
    sigmoid, so that the logits' gradient needs no normalizer (that is gate_gradients')."""
    calls = []
    for dtype in DTYPES:
        logits, _, _ = _small(g, dtype, "sigmoid", top_k=1)
        bias = torch.zeros(logits.shape[1], dtype=F32)
        calls.append(gates_call(logits, 1, score="sigmoid", bias=bias, requires_grad=("router_logits", "expert_bias"),
                                note="a zero bias requiring grad"))
    return calls


def default_arguments(g: torch.Generator) -> list[Call]:
    """Omitted options: softmax scores, no replay, no bias, no scaling."""
    calls = []
    for dtype in DTYPES:
        for top_k in (1, 2, 3):
            logits = draw_logits(g, _randint(g, 3, 7), _randint(g, top_k + 2, 9), top_k, dtype)
            calls.append(gates_call(logits, top_k, score=OMIT))
        logits = draw_logits(g, _randint(g, 3, 7), _randint(g, 5, 9), 2, dtype, "sigmoid")
        calls.append(gates_call(logits, 2, score="sigmoid", note="no bias, no scaling"))
    return as_one(calls, "defaults")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        tokens, experts, top_k = _randint(g, 4, 8), _randint(g, 5, 9), _randint(g, 1, 3)
        logits = draw_logits(g, tokens, experts, top_k, dtype)
        transposed = logits.t().contiguous().t()  # [T, E] with strides (1, T)
        calls.append(gates_call(transposed, top_k, note="a transposed view"))
        bias = draw_bias(g, experts)
        logits = draw_logits(g, tokens, experts, top_k, dtype, "sigmoid", bias)
        wide_bias = torch.stack([bias, -bias], dim=1)[:, 0]  # [E], stride 2
        replay = draw_replay(g, tokens, experts, top_k)
        wide_replay = torch.cat([replay, replay], dim=1)[:, :top_k]  # [T, k], row stride 2k
        calls.append(gates_call(logits, top_k, score="sigmoid", bias=wide_bias, note="a strided bias"))
        calls.append(gates_call(logits, top_k, wide_replay, "sigmoid", note="a strided replay"))
    return calls


# ---------------------------------------------------------------- ValueErrors, each beside a valid call


def _duplicate(replay: Tensor, adjacent: bool) -> Tensor:
    """The replay with row 0 repeating an expert: its first entry copied next to it, or two places away."""
    changed = replay.clone()
    changed[0, 1 if adjacent else 2] = changed[0, 0]
    return changed


def _with_entry(replay: Tensor, value: int) -> Tensor:
    changed = replay.clone()
    changed[-1, -1] = value
    return changed


Change = Callable[[Tensor, int, Tensor, torch.Generator], dict[str, Any]]  # (logits, k, replay, g) -> arguments


BAD_ARGUMENTS: list[tuple[str, Change]] = [
    ("router_logits 1-D", lambda u, k, r, g: {"router_logits": u[0]}),
    ("router_logits 3-D", lambda u, k, r, g: {"router_logits": u[None]}),
    ("router_logits int64", lambda u, k, r, g: {"router_logits": torch.randint(-5, 6, u.shape, generator=g)}),
    ("top_k = 0", lambda u, k, r, g: {"top_k": 0, "replay_idx": None}),
    ("top_k = E + 1", lambda u, k, r, g: {"top_k": u.shape[1] + 1, "replay_idx": None}),
    ("top_k negative", lambda u, k, r, g: {"top_k": -k, "replay_idx": None}),
    ("top_k = True (a bool)", lambda u, k, r, g: {"top_k": True, "replay_idx": None}),
    ("top_k a float", lambda u, k, r, g: {"top_k": float(k)}),
    ("replay_idx float32", lambda u, k, r, g: {"replay_idx": r.to(F32)}),
    ("replay_idx with k + 1 columns", lambda u, k, r, g: {"replay_idx": torch.cat([r, r[:, :1]], dim=1)}),
    ("replay_idx 1-D", lambda u, k, r, g: {"replay_idx": r[:, 0], "top_k": 1}),
    ("replay_idx with one row too many", lambda u, k, r, g: {"replay_idx": torch.cat([r, r[:1]], dim=0)}),
    ("replay_idx holding E", lambda u, k, r, g: {"replay_idx": _with_entry(r, u.shape[1])}),
    ("replay_idx holding -1", lambda u, k, r, g: {"replay_idx": _with_entry(r, -1)}),
    ("replay_idx repeating an expert in adjacent places", lambda u, k, r, g: {"replay_idx": _duplicate(r, True)}),
    ("replay_idx repeating an expert two places apart", lambda u, k, r, g: {"replay_idx": _duplicate(r, False)}),
    ("score_function 'Softmax'", lambda u, k, r, g: {"score_function": "Softmax"}),
    ("score_function 'tanh'", lambda u, k, r, g: {"score_function": "tanh"}),
    ("expert_bias with softmax",
     lambda u, k, r, g: {"score_function": "softmax", "expert_bias": draw_bias(g, u.shape[1]), "replay_idx": None}),
    ("expert_bias of E + 1 experts", lambda u, k, r, g: {"score_function": "sigmoid", "replay_idx": None,
                                                          "expert_bias": draw_bias(g, u.shape[1] + 1)}),
    ("expert_bias of shape [1, E]",
     lambda u, k, r, g: {"score_function": "sigmoid", "expert_bias": draw_bias(g, u.shape[1])[None]}),
    ("scaling_factor = 0", lambda u, k, r, g: {"scaling_factor": 0.0}),
    ("scaling_factor negative", lambda u, k, r, g: {"scaling_factor": -_uniform(g, 0.5, 2.0)}),
    ("scaling_factor = NaN", lambda u, k, r, g: {"scaling_factor": math.nan}),
    ("scaling_factor = inf", lambda u, k, r, g: {"scaling_factor": math.inf}),
]


def _errors(g: torch.Generator, family: str) -> list[Call]:
    """Each call of `family` that must raise beside a valid call on the same logits, all in one group and in an
    order drawn from g: raising on everything, or never, earns nothing, and a check missed for one argument of
    the family costs the family's clause whole."""
    calls = []
    for index, (label, change) in enumerate(BAD_ARGUMENTS):
        if _family(label) != family:
            continue
        tokens, experts, top_k = _randint(g, 3, 6), _randint(g, 5, 8), 3
        logits = draw_logits(g, tokens, experts, top_k, F32)
        replay = draw_replay(g, tokens, experts, top_k, avoid=logits)
        kwargs = {"router_logits": logits, "top_k": top_k, "replay_idx": replay, **change(logits, top_k, replay, g)}
        kwargs = {name: value for name, value in kwargs.items() if value is not None}
        calls.append(Call(FUNCTION, kwargs, f"{FUNCTION}: {label}: must raise", group=family))
        valid_replay = replay if index % 2 else None
        calls.append(gates_call(logits, top_k, valid_replay, note="valid: must not raise", group=family).as_partner())
    return _shuffled(calls, g)


def _family(label: str) -> str:
    """The validation clause a bad argument belongs to, read from the argument its label names first."""
    if label.startswith("replay_idx"):
        return "replay"
    if label.startswith(("expert_bias", "scaling_factor")):
        return "options"
    return "arguments"


def argument_errors(g: torch.Generator) -> list[Call]:
    """Bad router_logits, top_k and score_function."""
    return _errors(g, "arguments")


def replay_errors(g: torch.Generator) -> list[Call]:
    """Bad replay_idx: dtype, shape, range and repeated experts."""
    return _errors(g, "replay")


def option_errors(g: torch.Generator) -> list[Call]:
    """Bad expert_bias and scaling_factor."""
    return _errors(g, "options")


def float64_precision(g: torch.Generator) -> list[Call]:
    """Float64 logits far from any tie, under both rules, with and without replay: gates computed in float64
    agree with the reference to 1e-9, gates computed in float32 and cast back do not."""
    calls = []
    for score in ("softmax", "sigmoid"):
        for replayed in (False, True):
            logits, top_k, _ = _small(g, F64, score, tokens=6, experts=8)
            replay = draw_replay(g, logits.shape[0], logits.shape[1], top_k) if replayed else None
            calls.append(gates_call(logits, top_k, replay, score, note="float64 arithmetic"))
    return calls
