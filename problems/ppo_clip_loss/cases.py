"""Case generators for ppo_clip_loss: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T3 case mixes tokens on the unclipped branch, tokens on the clipped branch and padded positions,
under positive and negative advantages, so no trivial answer (zeros, a constant, the unclipped -r * A, the
input echoed back) matches a case by accident. Ratios are placed in named regions relative to the bounds
(below 1 - eps_low, inside, above 1 + eps_high, beyond the dual clip) and drawn at random inside them, so the
cases of two seeds differ in every call while each case keeps its edge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from grader.author import as_one
from grader.judge.cases import Call

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
FUNCTION = "ppo_clip_loss"
OMIT = object()  # an option left out of the call, so the learner's default applies

Widths = tuple[float, float]


class Batch(NamedTuple):
    """The four tensor arguments of one call; `mask` is bool until `with_mask` converts it."""

    logp: Tensor  # [B, L]
    old_logp: Tensor  # [B, L]
    advantages: Tensor  # [B]
    mask: Tensor  # [B, L]

    def with_mask(self, kind: str) -> Batch:
        return self._replace(mask=self.mask if kind == "bool" else self.mask.to(getattr(torch, kind)))

    def kwargs(self) -> dict[str, Tensor]:
        return {"logp": self.logp, "old_logp": self.old_logp, "advantages": self.advantages, "mask": self.mask}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _options(eps: Widths | None, dual_clip: object, reduction: object) -> dict[str, object]:
    options: dict[str, object] = {} if eps is None else {"eps_low": eps[0], "eps_high": eps[1]}
    if dual_clip is not OMIT:
        options["dual_clip"] = dual_clip
    if reduction is not OMIT:
        options["reduction"] = reduction
    return options


def _describe(batch: Batch, options: dict[str, object]) -> str:
    kind = str(batch.mask.dtype).removeprefix("torch.")
    shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in options.items())
    return f"{_name(batch.logp.dtype)} {list(batch.logp.shape)} {kind} mask, {shown or 'all options omitted'}"


def loss_call(batch: Batch, note: str = "", eps: Widths | None = (0.2, 0.2), dual_clip: object = None,
              reduction: object = "token_mean", grad: tuple[str, ...] = ("logp",), hidden: bool = False,
              group: str | None = None) -> Call:
    """One call; `eps=None` omits both widths, OMIT omits dual_clip or reduction; `grad` inputs require grad."""
    options = _options(eps, dual_clip, reduction)
    label = _describe(batch, options) + (f": {note}" if note else "")
    return Call(FUNCTION, {**batch.kwargs(), **options}, label, requires_grad=grad, backward=bool(grad),
                hidden=hidden, group=group)


# ---------------------------------------------------------------- ratios placed relative to the bounds


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def _log_uniform(g: torch.Generator, low: float, high: float) -> float:
    return math.exp(_uniform(g, math.log(low), math.log(high)))


class Regions:
    """Draw ratios in the regions that decide a token's branch for the widths `eps` and the dual clip `cap`."""

    def __init__(self, g: torch.Generator, eps: Widths, cap: float | None = None) -> None:
        self.g, self.low, self.high = g, 1.0 - eps[0], 1.0 + eps[1]
        self.cap = 4.0 if cap is None else cap  # without a dual clip, "beyond" is just a large ratio

    def below(self) -> float:
        """Under 1 - eps_low: clipped for A < 0, unclipped for A > 0."""
        return self.low * _log_uniform(self.g, 0.35, 0.85)

    def inside(self) -> float:
        return _log_uniform(self.g, max(self.low * 1.03, 0.9), min(self.high / 1.03, 1.1))

    def above(self) -> float:
        """Over 1 + eps_high but under the dual clip: clipped for A > 0, unclipped for A < 0."""
        return _log_uniform(self.g, self.high * 1.12, max(self.high * 1.15, min(self.high * 1.8, self.cap / 1.12)))

    def beyond(self) -> float:
        """Over the dual clip: capped at -c * A for A < 0."""
        return self.cap * _log_uniform(self.g, 1.15, 2.5)

    def between(self, a: float, b: float) -> float:
        return _log_uniform(self.g, min(a, b) * 1.02, max(a, b) / 1.02)


def _advantage(g: torch.Generator, sign: float, low: float = 0.4) -> float:
    return sign * _log_uniform(g, low, 2.5)


def _shuffled(g: torch.Generator, values: Sequence[float]) -> list[float]:
    return [values[i] for i in torch.randperm(len(values), generator=g).tolist()]


def assemble(g: torch.Generator, advantages: Sequence[float], ratios: Sequence[Sequence[float]], cols: int,
             dtype: torch.dtype, pad: tuple[float, float] | None = None, scatter: bool = False,
             shift: float = 0.0) -> Batch:
    """Row i holds the valid tokens `ratios[i]` (shuffled), then padding up to `cols` positions.

    old_logp is drawn at random and logp = old_logp + log r; the functions see the ratio of the rounded
    pair, within a few ulps of r. Padded positions hold `pad` (logp, old_logp), or random finite values that
    a solution ignoring the mask would pick up. `scatter` puts the valid tokens at random positions; `shift`
    moves every valid log-probability by the same amount, leaving the ratios as they are.
    """
    rows = len(ratios)
    old = shift - (torch.rand(rows, cols, generator=g, dtype=F64) * 4.0 + 0.05)  # [B, L]
    log_ratio = torch.zeros(rows, cols, dtype=F64)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for i, row in enumerate(ratios):
        assert len(row) <= cols, "more valid tokens than positions"
        where = torch.randperm(cols, generator=g)[: len(row)] if scatter else torch.arange(len(row))
        log_ratio[i, where] = torch.log(torch.tensor(_shuffled(g, row), dtype=F64))
        mask[i, where] = True
    logp = old + log_ratio
    if pad is None:
        pad_logp = -torch.rand(rows, cols, generator=g, dtype=F64) * 3.0
        pad_old = -torch.rand(rows, cols, generator=g, dtype=F64) * 3.0 - 1.5
    else:
        pad_logp, pad_old = torch.full((rows, cols), pad[0], dtype=F64), torch.full((rows, cols), pad[1], dtype=F64)
    logp, old = torch.where(mask, logp, pad_logp), torch.where(mask, old, pad_old)
    return Batch(logp.to(dtype), old.to(dtype), torch.tensor(list(advantages), dtype=dtype), mask)


# ---------------------------------------------------------------- T1: random batches against the oracle

# No square batch: where B = L, advantages broadcast along the wrong axis run silently, and that is
# advantages_per_response's to judge.
RANDOM_SHAPES = [(3, 6), (4, 5), (5, 9), (7, 6), (12, 5), (8, 33), (16, 64), (32, 128)]
# Symmetric widths: which bound each width sets is asymmetric_eps's clause, and eps_low = 0 is probed by
# value_errors alone, so a solution that swaps the widths or refuses eps_low = 0 is charged there and nowhere else.
RANDOM_WIDTHS: list[Widths] = [(0.2, 0.2), (0.1, 0.1), (0.3, 0.3), (0.25, 0.25), (0.15, 0.15)]
RANDOM_DUAL_CLIPS: list[float] = [3.0, 2.0, 10.0, 1.5]
# Ratios of the background tokens stay below 2.5: with no dual clip, a cap left on at 3 (verl's default) is
# the dual_clip_off clause's to charge, never the oracle's.
BACKGROUND_LOG_RATIO = (-1.5, 0.9)


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, eps: Widths,
                 dual_clip: float | None, empty_row: bool = False) -> Batch:
    """Random ragged batch (B >= 3, L >= 4) in which every branch of the loss is taken at least once.

    One response with A > 0 holds a token above 1 + eps_high (clipped), one below 1 - eps_low (unclipped)
    and one inside; one with A < 0 holds a token below 1 - eps_low (clipped), one between 1 + eps_high and
    the dual clip (unclipped) and, when the dual clip is on, one beyond it (capped). Every response holds a
    valid token unless `empty_row`, which empties one.
    """
    rows, cols = shape
    at = Regions(g, eps, dual_clip)
    lengths = torch.randint(1, cols + 1, (rows,), generator=g).tolist()
    positive, negative, empty = torch.randperm(rows, generator=g)[:3].tolist()
    lengths[positive], lengths[negative] = max(lengths[positive], 3), max(lengths[negative], 4)
    # a third response is emptied, or at least left one position short, so every batch holds padding
    lengths[empty] = 0 if empty_row else min(lengths[empty], cols - 1)
    low, high = BACKGROUND_LOG_RATIO
    ratios = [[math.exp(min(max(0.45 * float(torch.randn((), generator=g, dtype=F64)), low), high))
               for _ in range(n)] for n in lengths]
    ratios[positive][:3] = [at.above(), at.below(), at.inside()]
    ratios[negative][:4] = [at.below(), at.above(), at.beyond() if dual_clip is not None else at.above(),
                            at.inside()]
    advantages = [float(torch.randn((), generator=g, dtype=F64)) for _ in range(rows)]
    advantages[positive], advantages[negative] = _advantage(g, 1.0), _advantage(g, -1.0)
    return assemble(g, advantages, ratios, cols, dtype, scatter=True)


def half_clipped_row(at: Regions, sign: float, length: int, unclipped: Sequence[float] = ()) -> list[float]:
    """`length` ratios (even) of a response whose advantage has `sign`: half of them on the clipped branch, the
    other half `unclipped` and draws on the unclipped branch (no dual clip)."""
    clipped = at.above if sign > 0 else at.below
    others = (at.below, at.inside) if sign > 0 else (at.inside, at.above)
    rest = [others[int(torch.randint(2, (), generator=at.g))]() for _ in range(length // 2 - len(unclipped))]
    return [clipped() for _ in range(length // 2)] + list(unclipped) + rest


def half_clipped_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, eps: Widths) -> Batch:
    """Random ragged batch (B >= 3, L >= 5), no dual clip, every response of even length with half its tokens
    clipped: the mean over responses of each one's clipped share is then the share of the batch's valid tokens,
    so a clip fraction averaged per response (a clipfrac_token_share departure) is not seen under seq_mean.
    Every branch is taken, as in `random_batch`, and one response is left short, so the batch holds padding."""
    rows, cols = shape
    at = Regions(g, eps)
    even = 2 * ((cols - 1) // 2)  # the longest even length that leaves the short response some padding
    lengths = [2 * _randint(g, 1, cols // 2) for _ in range(rows)]
    positive, negative, short = torch.randperm(rows, generator=g)[:3].tolist()
    lengths[positive], lengths[negative] = max(lengths[positive], 4), max(lengths[negative], 4)
    lengths[short] = min(lengths[short], even)
    advantages = [float(torch.randn((), generator=g, dtype=F64)) for _ in range(rows)]
    advantages[positive], advantages[negative] = _advantage(g, 1.0), _advantage(g, -1.0)
    ratios = [half_clipped_row(at, math.copysign(1.0, a), n) for a, n in zip(advantages, lengths, strict=True)]
    ratios[positive] = half_clipped_row(at, 1.0, lengths[positive], [at.below(), at.inside()])
    ratios[negative] = half_clipped_row(at, -1.0, lengths[negative], [at.above(), at.inside()])
    return assemble(g, advantages, ratios, cols, dtype, scatter=True)


def _random_calls(g: torch.Generator, reductions: Sequence[str], grad: tuple[str, ...], dual: bool = False,
                  empty_row: bool = False, half_clipped: bool = False) -> list[Call]:
    """One call per shape and dtype on a bool mask; the dual clip and an empty response only where asked, and
    responses half clipped (`half_clipped_batch`) where asked."""
    calls = []
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            step = 2 * index + (dtype == F64)
            eps = RANDOM_WIDTHS[step % len(RANDOM_WIDTHS)]
            dual_clip = RANDOM_DUAL_CLIPS[step % len(RANDOM_DUAL_CLIPS)] if dual else None
            batch = (
                half_clipped_batch(g, shape, dtype, eps)
                if half_clipped
                else random_batch(g, shape, dtype, eps, dual_clip, empty_row=empty_row)
            )
            reduction = reductions[step % len(reductions)]
            calls.append(loss_call(batch, eps=eps, dual_clip=dual_clip, reduction=reduction, grad=grad, hidden=True))
    return calls


def random_token_mean(g: torch.Generator) -> list[Call]:
    return _random_calls(g, ["token_mean"], grad=())


def random_seq_mean(g: torch.Generator) -> list[Call]:
    """Responses half clipped: the loss's reduction is this family's, clipfrac's per-response reading is not."""
    return _random_calls(g, ["seq_mean"], grad=(), half_clipped=True)


def random_grad(g: torch.Generator) -> list[Call]:
    return _random_calls(g, ["token_mean", "seq_mean"], grad=("logp",))


def random_dual_clip(g: torch.Generator) -> list[Call]:
    """The dual clip on, under both reductions, loss and gradient: its family of random batches."""
    return _random_calls(g, ["token_mean", "seq_mean"], grad=("logp",), dual=True)


def random_empty_token_mean(g: torch.Generator) -> list[Call]:
    """One response with no valid token: it adds nothing to token_mean's count."""
    return _random_calls(g, ["token_mean"], grad=("logp",), empty_row=True)


def random_empty_seq_mean(g: torch.Generator) -> list[Call]:
    """One response with no valid token: it counts in seq_mean's B."""
    return _random_calls(g, ["seq_mean"], grad=("logp",), empty_row=True)


# ---------------------------------------------------------------- T0 contracts


def _small(g: torch.Generator, dtype: torch.dtype, eps: Widths = (0.2, 0.2), dual_clip: float | None = None,
           shape: tuple[int, int] = (4, 6)) -> Batch:
    return random_batch(g, shape, dtype, eps, dual_clip)


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, kind, reduction, dual_clip in [(F32, "bool", "token_mean", None), (F64, "float64", "seq_mean", 3.0),
                                              (F32, "int32", "seq_mean", None), (F64, "uint8", "token_mean", 2.0)]:
        batch = _small(g, dtype, dual_clip=dual_clip).with_mask(kind)
        calls.append(loss_call(batch, dual_clip=dual_clip, reduction=reduction))
    return calls


def contract_grad(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for reduction in ("token_mean", "seq_mean"):
            batch = _small(g, dtype, dual_clip=3.0)
            calls.append(loss_call(batch, "logp requires grad", dual_clip=3.0, reduction=reduction))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    """An empty mask over finite padding, each grouped with an ordinary batch of the same options. The padding is
    finite: NaN and inf padding are padding_nan_inf's clause, so a mask multiplied into the loss passes here and a
    denominator that divides 0 by 0 does not."""
    calls = []
    for dtype in DTYPES:
        for reduction, dual_clip in [("token_mean", None), ("seq_mean", 3.0), ("token_mean", 2.0)]:
            rows = int(torch.randint(3, 6, (), generator=g))
            logp, rollout = (-3 * torch.rand(2, rows, 7, generator=g, dtype=F64)).to(dtype)
            advantages = torch.randn(rows, generator=g, dtype=F64).to(dtype)
            empty = Batch(logp, rollout, advantages, torch.zeros(rows, 7, dtype=torch.bool))
            calls.append(loss_call(empty, "every token masked, finite padding", dual_clip=dual_clip,
                                   reduction=reduction))
            batch = _small(g, dtype, dual_clip=dual_clip, shape=(rows, 7))
            calls.append(loss_call(batch, "an ordinary batch", dual_clip=dual_clip, reduction=reduction).as_partner())
    return as_one(calls, "empty mask")


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        at = Regions(g, (0.2, 0.2), 3.0)
        ratios = [[at.above(), at.inside(), at.below()], [at.below(), at.beyond(), at.above(), at.inside()], []]
        batch = assemble(g, [_advantage(g, 1.0), _advantage(g, -1.0), 0.5], ratios, 6, dtype, pad=(math.nan, math.nan))
        calls.append(loss_call(batch, "NaN padding", dual_clip=3.0, grad=()))
        calls.append(loss_call(batch.with_mask(_name(dtype)), "NaN padding, float mask", reduction="seq_mean"))
        strided = batch._replace(logp=batch.logp.t().contiguous().t())
        calls.append(loss_call(strided, "NaN padding, column-major logp", dual_clip=3.0, reduction="seq_mean"))
    return calls


# ---------------------------------------------------------------- T2: one convention per check


def one_sided_clip(g: torch.Generator) -> list[Call]:
    """A > 0 is clipped only above 1 + eps, A < 0 only below 1 - eps; symmetric widths, no dual clip."""
    calls = []
    for dtype in DTYPES:
        for eps in [(0.2, 0.2), (0.1, 0.1), (0.3, 0.3)]:
            at = Regions(g, eps)
            mixed = [at.below, at.below, at.inside, at.inside, at.above, at.above]
            ratios = [[draw() for draw in mixed] for _ in range(3)]
            # |A| > 1 + eps: clipping A instead of r would then clip too, and never pass for the plain -A r
            advantages = [_advantage(g, 1.0, 1.5), _advantage(g, -1.0, 1.5), _advantage(g, 1.0, 1.5)]
            batch = assemble(g, advantages, ratios, 8, dtype)
            calls.append(loss_call(batch, "every region under both signs", eps=eps))
    return calls


ASYMMETRIC_WIDTHS: list[Widths] = [(0.1, 0.3), (0.3, 0.1), (0.2, 0.28), (0.05, 0.4)]


def asymmetric_eps(g: torch.Generator) -> list[Call]:
    """Ratios between 1 + eps_low and 1 + eps_high (A > 0) and between 1 - eps_high and 1 - eps_low (A < 0)."""
    calls = []
    for dtype in DTYPES:
        for eps in ASYMMETRIC_WIDTHS:
            at = Regions(g, eps)
            # one token clipped under either width as well, so every reading of the widths clips something
            outer = (1 + max(eps)) * _log_uniform(g, 1.15, 1.6), (1 - max(eps)) * _log_uniform(g, 0.4, 0.85)
            upper = [at.between(1 + eps[0], 1 + eps[1]) for _ in range(3)] + [at.inside(), at.below(), outer[0]]
            lower = [at.between(1 - eps[0], 1 - eps[1]) for _ in range(3)] + [at.inside(), at.above(), outer[1]]
            batch = assemble(g, [_advantage(g, 1.0), _advantage(g, -1.0)], [upper, lower], 7, dtype)
            calls.append(loss_call(batch, "ratios between the two widths' bounds", eps=eps))
    return calls


def default_arguments(g: torch.Generator) -> list[Call]:
    """Omitted options: eps 0.2 / 0.2, no dual clip, token_mean, on ragged responses that tell them apart."""
    calls = []
    for dtype in DTYPES:
        at = Regions(g, (0.2, 0.2), 3.0)
        # no ratio beyond 3 under A < 0: whether dual_clip=None caps anything is dual_clip_none's to judge
        ratios = [[at.between(1.2, 1.28), at.above(), at.inside()],
                  [at.between(0.72, 0.8), at.above(), at.above(), at.inside(), at.above(), at.below(), at.inside()],
                  [at.inside(), at.between(1.2, 1.28)]]
        batch = assemble(g, [_advantage(g, 1.0), _advantage(g, -1.0), _advantage(g, 1.0)], ratios, 8, dtype)
        calls.append(loss_call(batch, "every option omitted", eps=None, dual_clip=OMIT, reduction=OMIT))
        calls.append(loss_call(batch, "widths omitted", eps=None, dual_clip=None, reduction="token_mean"))
        # the options passed keep the background: equal widths (which width sets which bound is asymmetric_eps's
        # to judge) and no dual clip (its sign rule is the dual clip checks')
        calls.append(loss_call(batch, "dual_clip and reduction omitted", eps=(0.3, 0.3), dual_clip=OMIT,
                               reduction=OMIT))
        calls.append(loss_call(batch, "reduction omitted", eps=(0.2, 0.2), dual_clip=None, reduction=OMIT))
    return as_one(calls, "defaults")


def exact_log(bound: Tensor) -> Tensor:
    """A log-ratio d in bound's dtype with torch.exp(d) == bound exactly, searched among the floats near log(bound)."""
    inf = torch.tensor(math.inf, dtype=bound.dtype)
    below = above = torch.log(bound)
    for _ in range(64):
        for d in (below, above):
            if bool(torch.exp(d) == bound):
                return d
        below, above = torch.nextafter(below, -inf), torch.nextafter(above, inf)
    raise AssertionError(f"no log-ratio in {bound.dtype} whose exp is exactly {float(bound)}")


def _exact_pair(g: torch.Generator, d: Tensor) -> tuple[float, float]:
    """(logp, old_logp) in d's dtype whose difference, computed in that dtype, is exactly d."""
    old = -float(torch.randint(1, 17, (), generator=g)) / 8.0  # few significant bits, so old + d rounds rarely
    logp = (torch.tensor(old, dtype=d.dtype) + d)
    if bool(logp - torch.tensor(old, dtype=d.dtype) == d):
        return float(logp), old
    return float(d), 0.0


# Equal widths: a bound set by the other width is asymmetric_eps's to charge.
EXACT_WIDTHS: list[Widths] = [(0.2, 0.2), (0.28, 0.28), (0.1, 0.1)]


def exact_clip_bounds(g: torch.Generator) -> list[Call]:
    """Ratios exactly on 1 - eps_low and 1 + eps_high (in the input dtype): on the bound nothing is clipped."""
    calls = []
    for dtype in DTYPES:
        for eps in EXACT_WIDTHS:
            at = Regions(g, eps)
            on_low = exact_log(torch.tensor(1.0 - eps[0], dtype=dtype))
            on_high = exact_log(torch.tensor(1.0 + eps[1], dtype=dtype))
            # A > 0 row: on the upper bound twice, on the lower bound, inside, above (clipped).
            # A < 0 row: on the lower bound twice, on the upper bound, inside, below (clipped).
            rows = [[on_high, on_high, on_low, None, at.above()], [on_low, on_low, on_high, None, at.below()]]
            logp = torch.full((2, 6), -0.5, dtype=F64)
            old = torch.full((2, 6), -1.5, dtype=F64)
            for i, row in enumerate(rows):
                for t, item in enumerate(row):
                    if isinstance(item, Tensor):
                        logp[i, t], old[i, t] = _exact_pair(g, item)
                    else:
                        r = at.inside() if item is None else item
                        old[i, t] = _uniform(g, -3.0, -0.2)
                        logp[i, t] = old[i, t] + math.log(r)
            mask = torch.ones(2, 6, dtype=torch.bool)
            mask[:, 5] = False
            advantages = torch.tensor([_advantage(g, 1.0), _advantage(g, -1.0)], dtype=dtype)
            batch = Batch(logp.to(dtype), old.to(dtype), advantages, mask)
            for (i, t), item in zip([(0, 0), (1, 0)], (on_high, on_low), strict=True):
                assert bool(batch.logp[i, t] - batch.old_logp[i, t] == item), "the exact log-ratio was rounded away"
            calls.append(loss_call(batch, "ratios exactly on both bounds", eps=eps, grad=()))
    return as_one(calls, "clipfrac endpoints")


DUAL_CLIPS = (2.0, 3.0, 5.0)


def dual_clip_cap(g: torch.Generator) -> list[Call]:
    """Negative advantages only: tokens beyond the dual clip are capped at -c * A, the others are not."""
    calls = []
    for dtype in DTYPES:
        for c in DUAL_CLIPS:
            at = Regions(g, (0.2, 0.2), c)
            mixed = [at.below, at.inside, at.above, at.beyond, at.beyond]
            ratios = [[draw() for draw in mixed] for _ in range(3)]
            batch = assemble(g, [_advantage(g, -1.0) for _ in range(3)], ratios, 6, dtype)
            for reduction in ("token_mean", "seq_mean"):
                calls.append(loss_call(batch, f"A < 0, ratios on both sides of c = {c:g}", dual_clip=c,
                                       reduction=reduction))
    return calls


def dual_clip_positive_untouched(g: torch.Generator) -> list[Call]:
    """Positive advantages only, ratios up to beyond the dual clip: the dual clip changes nothing."""
    calls = []
    for dtype in DTYPES:
        for c in (1.5, 3.0):
            at = Regions(g, (0.2, 0.2), c)
            mixed = [at.below, at.inside, at.above, at.beyond, at.beyond]
            ratios = [[draw() for draw in mixed] for _ in range(3)]
            batch = assemble(g, [_advantage(g, 1.0) for _ in range(3)], ratios, 6, dtype)
            for reduction in ("token_mean", "seq_mean"):
                calls.append(loss_call(batch, f"A > 0 with dual_clip = {c:g}", dual_clip=c, reduction=reduction))
    return calls


def dual_clip_none(g: torch.Generator) -> list[Call]:
    """dual_clip=None, passed or omitted: negative-advantage tokens far beyond any cap keep their loss -A r."""
    calls = []
    for dtype in DTYPES:
        for reduction, dual_clip in (("token_mean", None), ("seq_mean", OMIT)):
            at = Regions(g, (0.2, 0.2), 3.0)
            mixed = [at.below, at.inside, at.above, at.beyond, at.beyond]
            ratios = [[draw() for draw in mixed] for _ in range(3)]
            advantages = [_advantage(g, -1.0), _advantage(g, 1.0), _advantage(g, -1.0)]
            batch = assemble(g, advantages, ratios, 6, dtype)
            calls.append(loss_call(batch, "A < 0 with ratios from 3.4 to 7.5, no dual clip", dual_clip=dual_clip,
                                   reduction=reduction))
    return calls


def clipfrac_sign(g: torch.Generator) -> list[Call]:
    """Tokens outside the interval on the side that does not bind for their sign are not clipped."""
    calls = []
    for dtype in DTYPES:
        for eps in [(0.2, 0.2), (0.3, 0.3)]:
            at = Regions(g, eps)
            positive = [at.below(), at.below(), at.below(), at.above(), at.inside()]
            negative = [at.above(), at.above(), at.above(), at.below(), at.inside()]
            batch = assemble(g, [_advantage(g, 1.0), _advantage(g, -1.0)], [positive, negative], 6, dtype)
            for reduction in ("token_mean", "seq_mean"):
                calls.append(loss_call(batch, "ratios outside on the non-binding side", eps=eps, reduction=reduction,
                                       grad=()))
    return calls


def clipfrac_ignores_dual_clip(g: torch.Generator) -> list[Call]:
    """Negative advantages with ratios beyond the dual clip: capped in the loss, not counted in clipfrac."""
    calls = []
    for dtype in DTYPES:
        for c in DUAL_CLIPS[:2]:
            at = Regions(g, (0.2, 0.2), c)
            ratios = [[at.beyond(), at.beyond(), at.below(), at.inside()], [at.beyond(), at.above(), at.inside()]]
            batch = assemble(g, [_advantage(g, -1.0), _advantage(g, -1.0)], ratios, 5, dtype)
            calls.append(loss_call(batch, f"ratios beyond c = {c:g}", dual_clip=c, grad=()))
    return calls


def _ragged(g: torch.Generator, lengths: Sequence[int], eps: Widths, clipped_share: Sequence[float],
            dtype: torch.dtype, cols: int) -> Batch:
    """Responses of the given lengths and alternating advantage signs; in row i a share clipped_share[i] of
    the tokens sits on the clipped branch, the rest inside the interval."""
    at = Regions(g, eps)
    advantages, ratios = [], []
    for i, n in enumerate(lengths):
        sign = 1.0 if i % 2 == 0 else -1.0
        clipped = at.above if sign > 0 else at.below
        k = round(clipped_share[i] * n)
        ratios.append([clipped() for _ in range(k)] + [at.inside() for _ in range(n - k)])
        advantages.append(_advantage(g, sign))
    return assemble(g, advantages, ratios, cols, dtype)


def clipfrac_token_share(g: torch.Generator) -> list[Call]:
    """clipfrac is clipped tokens over valid tokens of the whole batch, whatever the reduction."""
    calls = []
    for dtype in DTYPES:
        for lengths, shares in [((1, 9, 2, 6), (1.0, 0.0, 0.5, 1 / 3)), ((3, 1, 12), (0.0, 1.0, 0.25))]:
            batch = _ragged(g, lengths, (0.2, 0.2), shares, dtype, 14)
            for reduction in ("token_mean", "seq_mean"):
                calls.append(loss_call(batch, f"responses of {lengths} tokens", reduction=reduction, grad=()))
    return calls


# Even lengths, half of each response clipped: the per-response mean of clipped shares then equals the
# share of the batch's tokens, so a clipfrac averaged per response is not charged to the reduction checks.
REDUCTION_LENGTHS = [(2, 10, 6, 14), (2, 16, 4), (8, 4, 4, 12, 2)]


def _reduction_calls(g: torch.Generator, reduction: str, lengths_list: Sequence[Sequence[int]]) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for lengths in lengths_list:
            batch = _ragged(g, lengths, (0.2, 0.2), [0.5] * len(lengths), dtype, max(lengths) + 3)
            calls.append(loss_call(batch, f"responses of {tuple(lengths)} tokens", reduction=reduction))
    return calls


def token_mean_reduction(g: torch.Generator) -> list[Call]:
    return _reduction_calls(g, "token_mean", REDUCTION_LENGTHS)


def seq_mean_reduction(g: torch.Generator) -> list[Call]:
    return _reduction_calls(g, "seq_mean", REDUCTION_LENGTHS)


def seq_mean_empty_responses(g: torch.Generator) -> list[Call]:
    """Empty responses count in B: their mean is 0 and they dilute the others."""
    return _reduction_calls(g, "seq_mean", [(0, 6, 2), (4, 0, 0, 10, 2), (8, 2, 0)])


PADDINGS = [(math.nan, math.nan), (math.inf, -math.inf), (-math.inf, math.nan), (math.nan, math.inf)]


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for index, pad in enumerate(PADDINGS):
            # no dual clip and no ratio under A < 0 that a cap would reach: the dual clip is not this check's
            at = Regions(g, (0.2, 0.2))
            ratios = [[at.above(), at.inside(), at.below()], [at.below(), at.above(), at.inside(), at.above()],
                      [at.inside()]]
            advantages = [_advantage(g, 1.0), _advantage(g, -1.0), _advantage(g, -1.0)]
            batch = assemble(g, advantages, ratios, 6, dtype, pad=pad)
            reduction = ("token_mean", "seq_mean")[index % 2]
            calls.append(loss_call(batch, f"padding logp={pad[0]}, old_logp={pad[1]}", reduction=reduction))
    return calls


# Where exp of a log-probability underflows to 0 (below about -103.3 in float32 and -744.4 in float64),
# and log-ratios near the edges of the statement's [-20, 20].
TINY_SHIFTS = {F32: (-110.0, -140.0), F64: (-760.0, -900.0)}
EDGE_LOG_RATIO = 19.0


def extreme_log_probs(g: torch.Generator) -> list[Call]:
    """Valid log-probabilities far below where exp underflows, and log-ratios of +-19: only exp(logp - old_logp)
    gives the ratio there; exp(logp) / exp(old_logp) is 0 / 0."""
    calls = []
    for dtype in DTYPES:
        for index, shift in enumerate(TINY_SHIFTS[dtype]):
            at = Regions(g, (0.2, 0.2))
            edge = math.exp(EDGE_LOG_RATIO * _uniform(g, 0.97, 1.0))
            # each edge on the side its advantage clips, no dual clip: a log-ratio of +19 under A < 0 would also
            # charge a dual clip (or a cap left on), which is not this check's
            ratios = [[at.above(), at.inside(), at.below(), edge], [at.below(), 1.0 / edge, at.inside(), at.above()],
                      [at.inside(), at.below()]]
            # every response half clipped: a clip fraction averaged per response is not this check's either
            advantages = [_advantage(g, 1.0), _advantage(g, -1.0), _advantage(g, -1.0)]
            batch = assemble(g, advantages, ratios, 5, dtype, shift=shift)
            reduction = ("token_mean", "seq_mean")[index]
            calls.append(loss_call(batch, f"valid log-probabilities near {shift:g}, log-ratios up to +-19",
                                   reduction=reduction))
    return calls


# [B, L] of the calls a check judges on how they answer rather than on values: B >= 7, which no other public
# check's batches reach, L > B (never square) and B * L <= 400, one shape per check and seed, so that the graded
# seeds' shapes are none of the public seed's (a test keeps it so) and no answer of a public call fits a graded one.
ANSWERING_ROWS, ANSWERING_SIZE = (7, 19), 400


def answering_shape(g: torch.Generator) -> tuple[int, int]:
    rows = _randint(g, *ANSWERING_ROWS)
    return rows, _randint(g, rows + 1, ANSWERING_SIZE // rows)


def _randint(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (), generator=g))


def all_clipped(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype) -> Batch:
    """Every valid token on its clipped branch (A > 0 above 1 + eps, A < 0 below 1 - eps, eps 0.2), with padding."""
    rows, cols = shape
    at = Regions(g, (0.2, 0.2))
    signs = [(1.0, -1.0)[i % 2] for i in range(rows)]
    lengths = [_randint(g, 1, cols - 1) for _ in range(rows)]
    draws = [at.above if sign > 0 else at.below for sign in signs]
    ratios = [[draw() for _ in range(n)] for draw, n in zip(draws, lengths, strict=True)]
    return assemble(g, [_advantage(g, sign) for sign in signs], ratios, cols, dtype, scatter=True)


def stop_gradient(g: torch.Generator) -> list[Call]:
    """Each ordinary batch is grouped with one whose every token is clipped, where logp too receives no gradient:
    an answer whose gradient reaches logp whatever the inputs (the input echoed back) fails its group."""
    grad = ("logp", "old_logp", "advantages")
    shape = answering_shape(g)
    calls = []
    for dtype in DTYPES:
        for reduction in ("token_mean", "seq_mean"):
            group = f"stop-gradient {_name(dtype)} {reduction}"
            ordinary = random_batch(g, shape, dtype, (0.2, 0.2), None)
            calls.append(loss_call(ordinary, "logp, old_logp and advantages all require grad", reduction=reduction,
                                   grad=grad, group=group))
            clipped = all_clipped(g, (_randint(g, 3, 6), _randint(g, 7, 10)), dtype)
            calls.append(loss_call(clipped, "every token clipped, so no input receives gradient",
                                   reduction=reduction, grad=grad, group=group))
    return calls


def advantages_per_response(g: torch.Generator) -> list[Call]:
    """Square batches (B = L), where broadcasting [B] along the token axis runs silently."""
    calls = []
    for dtype in DTYPES:
        for size in (3, 5):
            at = Regions(g, (0.2, 0.2))
            ratios = [[at.above(), at.below(), at.inside()][: size - 1] for _ in range(size)]
            advantages = [_advantage(g, (1.0, -1.0)[i % 2]) for i in range(size)]
            batch = assemble(g, advantages, ratios, size, dtype, scatter=True)
            for reduction in ("token_mean", "seq_mean"):
                calls.append(loss_call(batch, f"B = L = {size}", reduction=reduction))
    return calls


def mask_dtypes(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, kind in [(F32, "float64"), (F32, "int32"), (F32, "uint8"), (F64, "float32"), (F64, "int64")]:
        batch = _small(g, dtype).with_mask(kind)
        calls.append(loss_call(batch, f"{_name(dtype)} logp with a {kind} mask",
                               reduction=("token_mean", "seq_mean")[len(calls) % 2]))
    return calls


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        batch = _small(g, dtype, shape=(6, 8))
        transposed = Batch(*(t.t().contiguous().t() for t in (batch.logp, batch.old_logp)),
                           torch.stack([batch.advantages, -batch.advantages], dim=1)[:, 0],
                           batch.mask.t().contiguous().t())
        assert not transposed.logp.is_contiguous() and not transposed.advantages.is_contiguous()
        calls.append(loss_call(transposed, "transposed [6, 8] views, strided advantages"))
        # every second column of a wider batch holds a half-clipped batch (the seq_mean call's clipfrac is then
        # the same read per response), the other columns random values that a strided read would pick up
        narrow, wide = half_clipped_batch(g, (5, 8), dtype, (0.2, 0.2)), _small(g, dtype, shape=(5, 16))
        for wide_t, narrow_t in zip(wide, narrow, strict=True):
            if wide_t.dim() == 2:
                wide_t[:, ::2] = narrow_t
        wide = wide._replace(advantages=narrow.advantages)
        sliced = wide._replace(logp=wide.logp[:, ::2], old_logp=wide.old_logp[:, ::2], mask=wide.mask[:, ::2])
        calls.append(loss_call(sliced, "every second column of [5, 16]", reduction="seq_mean"))
    return calls


def value_errors(g: torch.Generator) -> list[Call]:
    """Each must-raise call is grouped with a valid call at an edge of the contract, which must not raise."""
    batch = _small(g, F32, shape=(3, 4))
    empty = batch._replace(mask=torch.zeros(3, 4, dtype=torch.bool))
    raising: list[tuple[str, dict[str, object]]] = [
        ("logp 1-D", {"logp": batch.logp[0], "old_logp": batch.old_logp[0], "mask": batch.mask[0]}),
        ("logp 3-D", {"logp": batch.logp[None], "old_logp": batch.old_logp[None], "mask": batch.mask[None]}),
        ("logp int64", {"logp": batch.logp.round().to(torch.int64)}),
        ("old_logp [3, 5]", {"old_logp": torch.zeros(3, 5)}),
        ("old_logp [1, 4] (broadcastable)", {"old_logp": batch.old_logp[:1]}),
        ("mask [3, 1] (broadcastable)", {"mask": batch.mask[:, :1]}),
        ("advantages [4] for B = 3", {"advantages": torch.zeros(4)}),
        ("advantages [3, 1]", {"advantages": batch.advantages[:, None]}),
        ("advantages [3, 4]", {"advantages": batch.logp.clone()}),
        ("eps_low = -0.1", {"eps_low": -0.1}),
        ("eps_low = 1", {"eps_low": 1.0}),
        ("eps_low = NaN", {"eps_low": math.nan}),
        ("eps_high = 0", {"eps_high": 0.0}),
        ("eps_high = inf", {"eps_high": math.inf}),
        ("eps_high = NaN", {"eps_high": math.nan}),
        ("dual_clip = 1", {"dual_clip": 1.0}),
        ("dual_clip = 0.5", {"dual_clip": 0.5}),
        ("dual_clip = inf", {"dual_clip": math.inf}),
        ("dual_clip = NaN", {"dual_clip": math.nan}),
        ("reduction = 'mean'", {"reduction": "mean"}),
        ("reduction = 'sum'", {"reduction": "sum"}),
        ("reduction = 'sequence_mean', every token masked", {**empty.kwargs(), "reduction": "sequence_mean"}),
        ("eps_high = -0.2, every token masked", {**empty.kwargs(), "eps_high": -0.2}),
    ]
    valid: list[tuple[str, dict[str, object]]] = [
        ("eps_low = 0", {"eps_low": 0.0}),
        ("eps_low = 0.999", {"eps_low": 0.999}),
        ("eps_high = 5", {"eps_high": 5.0}),
        ("eps_high = 1e-6", {"eps_high": 1e-6}),
        ("dual_clip = 1.0001", {"dual_clip": 1.0001}),
        ("dual_clip = 100", {"dual_clip": 100.0}),
        ("dual_clip = 3 (an int)", {"dual_clip": 3}),
        ("reduction = 'seq_mean'", {"reduction": "seq_mean"}),
    ]
    base: dict[str, object] = {**batch.kwargs(), "eps_low": 0.2, "eps_high": 0.2, "dual_clip": None,
                               "reduction": "token_mean"}
    shape = answering_shape(g)
    calls = []
    # groups in a drawn order, and within each group a drawn order, so that where the raising calls sit says
    # nothing about a graded call
    for index in torch.randperm(len(raising), generator=g).tolist():
        label, change = raising[index]
        bad = Call(FUNCTION, {**base, **change}, f"{FUNCTION}: {label} must raise ValueError")
        ok_label, ok_change = valid[index % len(valid)]
        # the partner's shape is drawn where no public call's is, and its loss must carry logp's graph: an answer
        # copied from a public call cannot be connected to it
        fresh = _small(g, F32, dual_clip=3.0, shape=shape)
        good = Call(FUNCTION, {**base, **fresh.kwargs(), **ok_change}, f"{FUNCTION}: {ok_label} is valid",
                    requires_grad=("logp",), backward=True).as_partner()
        calls += [bad, good] if bool(torch.rand((), generator=g) < 0.5) else [good, bad]
    return as_one(calls, "value errors")


def float64_precision(g: torch.Generator) -> list[Call]:
    """Ordinary float64 batches under both reductions: a loss computed in float64 agrees with the reference to
    1e-9, one computed in float32 and cast back does not."""
    calls = []
    for reduction in ("token_mean", "seq_mean"):
        calls.append(loss_call(_small(g, F64, shape=(4, 8)), "float64 arithmetic", reduction=reduction))
    return calls
