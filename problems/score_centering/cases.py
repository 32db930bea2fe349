"""Case generators for score_centering_loss: each takes a seeded torch.Generator and returns the calls to make.

Every row is built in float64 from three things: the trainer's logits, the sampler's distribution q and the
sampler's head H (the k token ids whose q it recorded). Each T1-T3 case holds an active row whose centring
correction is far from zero, so no trivial answer (zeros, a constant, an input echoed back, or the uncentred
loss -A w log p) matches it. Float32 rows are kept well conditioned: tails of at least a few percent, and no
ratio within 1e-3 of a MIS bound, so any faithful float32 or float64 computation lands within the tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import Tensor

from grader.author import as_one
from grader.judge.cases import Call

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
DTYPES = (F32, F64)
FUNCTION = "score_centering_loss"
MASK_KINDS = ("bool", "float32", "int64", "uint8", "float64", "int32")
DEFAULT_BOUNDS = {"tis": (0.0, 2.0), "mis": (0.5, 5.0)}
DEFAULT_EPS = 1e-6
NEG_INF = -math.inf
# A float32 tail must hold this much mass, so that 1 - P_H keeps its relative precision.
MIN_TAIL = {F32: 0.03, F64: 1e-4, BF16: 0.01, F16: 0.01}  # half-precision logits are computed in float32
# A MIS ratio this close (relatively) to a bound could land on either side in another faithful computation.
MIS_MARGIN = {F32: 1e-3, F64: 1e-7, BF16: 2e-2, F16: 2e-2}
TRIES = 400


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand(1, generator=g, dtype=F64))


def _log_uniform(g: torch.Generator, low: float, high: float) -> float:
    return math.exp(_uniform(g, math.log(low), math.log(high)))


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _sign(g: torch.Generator) -> float:
    return 1.0 if float(torch.rand(1, generator=g)) < 0.5 else -1.0


def _advantage(g: torch.Generator) -> float:
    return _sign(g) * _uniform(g, 0.4, 2.0)


# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class Options:
    """The keyword options of one call; None leaves the argument out, so the learner's default applies."""

    mode: str | None = "none"
    low: float | None = None
    high: float | None = None
    eps: float | None = None

    def kwargs(self) -> dict[str, object]:
        given = {"mode": self.mode, "low": self.low, "high": self.high, "eps": self.eps}
        return {name: value for name, value in given.items() if value is not None}

    def bounds(self) -> tuple[float, float]:
        """The bounds the call means, defaults filled in ("none" has none)."""
        mode = self.mode or "none"
        if mode == "none":
            return 0.0, math.inf
        low, high = DEFAULT_BOUNDS[mode]
        return (low if self.low is None else self.low), (high if self.high is None else self.high)

    @property
    def resolved_mode(self) -> str:
        return self.mode or "none"

    @property
    def resolved_eps(self) -> float:
        return DEFAULT_EPS if self.eps is None else self.eps

    def describe(self) -> str:
        if self.mode is None:
            text = "mode omitted"
        elif self.mode == "none":
            text = "mode none"
        else:
            low = "default" if self.low is None else f"{self.low:g}"
            high = "default" if self.high is None else f"{self.high:g}"
            text = f"mode {self.mode} [{low}, {high}]"
        return text + ("" if self.eps is None else f", eps {self.eps:g}")


NONE = Options("none")


def weight(x: float, mode: str, low: float, high: float) -> float:
    if mode == "none":
        return 1.0
    if mode == "tis":
        return min(max(x, low), high)
    return x if low <= x <= high else 0.0


# ---------------------------------------------------------------- rows and batches


@dataclass(frozen=True)
class Row:
    """One token position, in float64: the trainer's logits and what the sampler recorded."""

    logits: Tensor  # [V]
    token: int
    log_q_y: float
    head: tuple[int, ...]
    log_q_head: tuple[float, ...]  # -inf where the sampler gave the token no mass
    advantage: float

    @property
    def vocab(self) -> int:
        return self.logits.shape[0]


@dataclass(frozen=True)
class Stats:
    """What the contract computes from one row, in float64 (for conditioning, never for expected values)."""

    p: Tensor  # [V]
    tail_p: float  # 1 - P_H
    tail_q: float  # 1 - Q_H
    ratio_y: float
    ratio_head: tuple[float, ...]  # inf where q_v = 0

    def alpha(self, eps: float) -> float:
        return max(self.tail_q, eps) / max(self.tail_p, eps)


def stats(row: Row) -> Stats:
    logp = torch.log_softmax(row.logits, dim=0)  # [V]
    p = logp.exp()
    head = list(row.head)
    q_head = [math.exp(v) if v != NEG_INF else 0.0 for v in row.log_q_head]
    ratios = tuple(math.exp(float(logp[v]) - lq) if lq != NEG_INF else math.inf
                   for v, lq in zip(head, row.log_q_head, strict=True))
    return Stats(p, 1.0 - float(p[head].sum()) if head else 1.0, 1.0 - math.fsum(q_head),
                 math.exp(float(logp[row.token]) - row.log_q_y), ratios)


def conditioned(row: Row, dtype: torch.dtype, options: Options) -> bool:
    """True when every faithful computation in `dtype` gives the same loss within the tolerance."""
    s = stats(row)
    eps = options.resolved_eps
    for tail in (s.tail_p, s.tail_q):
        if not (tail >= MIN_TAIL[dtype] or tail <= eps / 10):
            return False
    if options.resolved_mode == "mis":
        low, high = options.bounds()
        alpha = s.alpha(eps)
        for ratio in (s.ratio_y, 1.0 / alpha, *s.ratio_head):
            if math.isfinite(ratio) and any(abs(ratio - b) <= MIS_MARGIN[dtype] * max(b, 1e-30) for b in (low, high)):
                return False
    return True


def residual_size(row: Row, options: Options) -> float:
    """max |residual_v log p_v| over the head: how far this row's loss is from the uncentred one."""
    s = stats(row)
    mode, (low, high) = options.resolved_mode, options.bounds()
    alpha = s.alpha(options.resolved_eps)
    alpha_prime = alpha * weight(1.0 / alpha, mode, low, high)
    sizes = [0.0]
    for v, lq, ratio in zip(row.head, row.log_q_head, s.ratio_head, strict=True):
        qv = 0.0 if lq == NEG_INF else math.exp(lq)
        residual = (qv * weight(ratio, mode, low, high) if qv > 0 else 0.0) - alpha_prime * float(s.p[v])
        sizes.append(abs(residual * math.log(float(s.p[v]))) if s.p[v] > 0 else 0.0)
    return max(sizes)


def draw(make: Callable[[], Row], ok: Callable[[Row], bool]) -> Row:
    """The first row `make` gives that passes `ok`."""
    for _ in range(TRIES):
        row = make()
        if ok(row):
            return row
    raise RuntimeError("no well-conditioned row found; the generator's parameters are inconsistent")


def distributions(g: torch.Generator, vocab: int, scale: float, mismatch: float) -> tuple[Tensor, Tensor]:
    """Trainer logits [V] and a sampler distribution q [V] that disagrees with softmax(logits) by `mismatch`."""
    logits = torch.randn(vocab, generator=g, dtype=F64) * scale
    q = torch.softmax(logits + torch.randn(vocab, generator=g, dtype=F64) * mismatch, dim=0)
    return logits, q


def _sample(g: torch.Generator, weights: Tensor) -> int:
    return int(torch.multinomial(weights, 1, generator=g))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else NEG_INF


def random_row(g: torch.Generator, vocab: int, k: int, zero_slots: float = 0.0, outside: bool | None = None) -> Row:
    """A row whose head is the top-k of q; some head slots recorded with q = 0 (log q = -inf) when
    `zero_slots` > 0; the token sampled from q, forced outside (True) or inside (False) the head if asked."""
    logits, q = distributions(g, vocab, _uniform(g, 0.7, 2.5), _uniform(g, 0.4, 1.5))
    head = q.argsort(descending=True)[:k].tolist()
    for v in head[1:]:
        if float(torch.rand(1, generator=g)) < zero_slots:
            q[v] = 0.0
    q = q / q.sum()
    tail = [v for v in range(vocab) if v not in head]
    if outside is None:
        token = _sample(g, q)
    elif outside and tail:
        token = tail[_sample(g, q[tail])]
    else:
        inside = [v for v in head if q[v] > 0]
        token = inside[_sample(g, q[inside])]
    return Row(logits, token, math.log(float(q[token])), tuple(head), tuple(_log(float(q[v])) for v in head),
               _advantage(g))


def matched_head_row(g: torch.Generator, vocab: int, k: int, ratio_spread: float = 0.0, outside: bool = True,
                     scale: tuple[float, float] = (0.7, 2.0)) -> Row:
    """A row whose head holds as much q-mass as p-mass (alpha = 1), with head ratios spread by `ratio_spread`
    (log-uniform in [1/s, s]) and q_y = p_y / rho for the sampled token."""
    logits = torch.randn(vocab, generator=g, dtype=F64) * _uniform(g, *scale)
    p = torch.softmax(logits, dim=0)
    head = torch.randperm(vocab, generator=g)[:k].tolist()
    mass = float(p[head].sum())
    spread = torch.tensor([_log_uniform(g, 1 / ratio_spread, ratio_spread) if ratio_spread else 1.0 for _ in head],
                          dtype=F64)
    q_head = p[head] / spread
    q_head = q_head * mass / q_head.sum()  # Q_H = P_H
    tail = [v for v in range(vocab) if v not in head]
    if outside and tail:
        token = tail[_sample(g, p[tail])]
        rho = _log_uniform(g, 0.8, 1.25)
        log_q_y = math.log(min(float(p[token]) / rho, 0.9 * (1.0 - mass)))
    else:
        slot = _randint(g, 0, k - 1)
        token, log_q_y = head[slot], math.log(float(q_head[slot]))
    return Row(logits, token, log_q_y, tuple(head), tuple(math.log(float(x)) for x in q_head), _advantage(g))


# ---------------------------------------------------------------- assembling a batch


@dataclass(frozen=True)
class Batch:
    """The call's tensor arguments."""

    logits: Tensor  # [N, V]
    tokens: Tensor  # [N]
    rollout_logp: Tensor  # [N]
    head_ids: Tensor  # [N, k]
    rollout_head_logp: Tensor  # [N, k]
    advantages: Tensor  # [N]
    mask: Tensor  # [N]

    def kwargs(self) -> dict[str, Tensor]:
        return {"logits": self.logits, "tokens": self.tokens, "rollout_logp": self.rollout_logp,
                "head_ids": self.head_ids, "rollout_head_logp": self.rollout_head_logp,
                "advantages": self.advantages, "mask": self.mask}

    def describe(self) -> str:
        n, vocab = self.logits.shape
        kind = str(self.mask.dtype).removeprefix("torch.")
        return f"{_name(self.logits.dtype)} N={n} V={vocab} k={self.head_ids.shape[1]}, {kind} mask"


def mask_as(active: list[bool], kind: str) -> Tensor:
    mask = torch.tensor(active, dtype=torch.bool)
    return mask if kind == "bool" else mask.to(getattr(torch, kind))


def assemble(rows: list[Row], active: list[bool], dtype: torch.dtype, mask_kind: str = "bool",
             other_dtype: torch.dtype | None = None, id_dtype: torch.dtype = torch.int64) -> Batch:
    """Stack rows of one vocabulary and head size; logits in `dtype`, the other floats in `other_dtype`
    (float32 for half-precision logits by default, else the logits' dtype)."""
    others = other_dtype or (F32 if dtype in (BF16, F16) else dtype)
    k = len(rows[0].head)
    return Batch(
        logits=torch.stack([r.logits for r in rows]).to(dtype),
        tokens=torch.tensor([r.token for r in rows], dtype=id_dtype),
        rollout_logp=torch.tensor([r.log_q_y for r in rows], dtype=F64).to(others),
        head_ids=torch.tensor([list(r.head) for r in rows], dtype=id_dtype).reshape(len(rows), k),
        rollout_head_logp=torch.tensor([list(r.log_q_head) for r in rows], dtype=F64).reshape(len(rows), k).to(others),
        advantages=torch.tensor([r.advantage for r in rows], dtype=F64).to(others),
        mask=mask_as(active, mask_kind),
    )


def loss_call(batch: Batch, note: str, options: Options = NONE, requires_grad: tuple[str, ...] = ("logits",),
              hidden: bool = False, group: str | None = None) -> Call:
    kwargs = {**batch.kwargs(), **options.kwargs()}
    label = f"{FUNCTION}: {batch.describe()}, {options.describe()}" + (f": {note}" if note else "")
    return Call(FUNCTION, kwargs, label, requires_grad=requires_grad, backward=bool(requires_grad), hidden=hidden,
                group=group)


def accepts(dtype: torch.dtype, options: Options, min_residual: float = 0.0,
            also: Callable[[Row], bool] | None = None) -> Callable[[Row], bool]:
    """A row filter: conditioned for `dtype`, a correction of at least `min_residual`, and `also` if given."""
    def ok(row: Row) -> bool:
        return ((also is None or also(row)) and conditioned(row, dtype, options)
                and residual_size(row, options) >= min_residual)

    return ok


def _rows(g: torch.Generator, n: int, make: Callable[[], Row], dtype: torch.dtype, options: Options,
          min_residual: float = 0.05, first: Callable[[Row], bool] | None = None,
          every: Callable[[Row], bool] | None = None) -> list[Row]:
    """n conditioned rows (each passing `every`); the first one also passes `first` and has a correction of at
    least `min_residual`, so the case discriminates."""
    def both(row: Row) -> bool:
        return (first is None or first(row)) and (every is None or every(row))

    rows = [draw(make, accepts(dtype, options, min_residual, both))]
    rows += [draw(make, accepts(dtype, options, also=every)) for _ in range(n - 1)]
    return rows


def _activity(g: torch.Generator, n: int, share: float = 0.25) -> list[bool]:
    """Row 0 active (it holds the discriminating row), about `share` of the others padding."""
    return [True] + [float(torch.rand(1, generator=g)) >= share for _ in range(n - 1)]


def _shuffled(g: torch.Generator, rows: list[Row], active: list[bool]) -> tuple[list[Row], list[bool]]:
    order = torch.randperm(len(rows), generator=g).tolist()
    return [rows[i] for i in order], [active[i] for i in order]


def _batch_of(g: torch.Generator, make: Callable[[], Row], n: int, dtype: torch.dtype, options: Options,
              mask_kind: str = "bool", min_residual: float = 0.05) -> Batch:
    """n rows from `make`, shuffled, about a quarter of them padding (never the discriminating one)."""
    rows = _rows(g, n, make, dtype, options, min_residual)
    rows, active = _shuffled(g, rows, _activity(g, n))
    return assemble(rows, active, dtype, mask_kind)


def random_batch(g: torch.Generator, n: int, vocab: int, k: int, dtype: torch.dtype, options: Options,
                 mask_kind: str = "bool", zero_slots: float = 0.0, min_residual: float = 0.05) -> Batch:
    make = partial(random_row, g, vocab, k, zero_slots)
    return _batch_of(g, make, n, dtype, options, mask_kind, min_residual)


# ---------------------------------------------------------------- T1: random batches against the oracle

RANDOM_SHAPES = [(4, 8, 3), (6, 16, 5), (3, 5, 2), (8, 32, 8), (2, 3, 1), (16, 64, 16), (5, 12, 7), (32, 128, 24)]
# The neutral background of the oracle checks: TIS clips from above only (low = 0, its default), every head slot
# recorded with q > 0, bool masks, finite padding; each convention left out is a family of its own below.
RANDOM_OPTIONS = [NONE, Options("tis", 0.0, 2.0), Options("mis", 0.5, 5.0), Options("tis", 0.0, 1.5),
                  Options("mis", 0.8, 1.25),
                  Options("none", eps=1e-4), Options("mis", 0.2, 2.0), Options("tis", 0.0, 5.0),
                  Options("mis", 0.25, 4.0, 1e-5)]
LARGE_SHAPES = [(8, 1024, 32), (16, 4096, 128), (4, 2048, 64)]
ZERO_SLOT_SHAPES = [(4, 8, 3), (6, 16, 5), (5, 12, 7), (8, 32, 8)]
# MIS first: its weight x * 1[low <= x <= high] is where a q = 0 slot's infinite ratio turns into NaN
ZERO_SLOT_RANDOM_OPTIONS = [Options("mis", 0.5, 5.0), Options("mis", 0.25, 4.0), Options("mis", 0.2, 2.0),
                            Options("tis", 0.0, 2.0)]
TIS_FLOOR_SHAPES = [(4, 8, 3), (6, 16, 5), (3, 5, 2), (8, 32, 8), (16, 64, 16), (5, 12, 7)]
TIS_FLOOR_OPTIONS = [Options("tis", 0.2, 1.5), Options("tis", 0.5, 5.0), Options("tis", 0.8, 1.25)]


def _tail_counts(options: Options, row: Row) -> bool:
    """The reconstructed tail's share of the residual, alpha' p_v, is far from zero on this row."""
    s = stats(row)
    alpha = s.alpha(options.resolved_eps)
    low, high = options.bounds()
    return alpha * weight(1.0 / alpha, options.resolved_mode, low, high) >= 0.1


def _random_calls(g: torch.Generator, shapes: list[tuple[int, int, int]], stride: int) -> list[Call]:
    """Each batch's discriminating row moves both parts of its residual, the head's q f and the tail's alpha' p."""
    calls = []
    for index, (n, vocab, k) in enumerate(shapes):
        for dtype in DTYPES:
            options = RANDOM_OPTIONS[(stride * index + (dtype == F64)) % len(RANDOM_OPTIONS)]
            rows = _rows(g, n, partial(random_row, g, vocab, k), dtype, options, first=partial(_tail_counts, options))
            rows, active = _shuffled(g, rows, _activity(g, n))
            calls.append(loss_call(assemble(rows, active, dtype), "random rows", options, hidden=True))
    return calls


def random_cases(g: torch.Generator) -> list[Call]:
    return _random_calls(g, RANDOM_SHAPES, 2)


def random_large(g: torch.Generator) -> list[Call]:
    return _random_calls(g, LARGE_SHAPES, 3)


def random_zero_slots(g: torch.Generator) -> list[Call]:
    """Random batches whose heads hold slots recorded with q = 0 (log q = -inf), one at least on an active row."""
    calls = []
    for index, (n, vocab, k) in enumerate(ZERO_SLOT_SHAPES):
        for dtype in DTYPES:
            options = ZERO_SLOT_RANDOM_OPTIONS[(2 * index + (dtype == F64)) % len(ZERO_SLOT_RANDOM_OPTIONS)]
            make = partial(random_row, g, vocab, k, 0.3)
            rows = _rows(g, n, make, dtype, options, first=_has_zero_slot)
            rows, active = _shuffled(g, rows, _activity(g, n))
            calls.append(loss_call(assemble(rows, active, dtype), "random rows, head slots with q = 0", options,
                                   hidden=True))
    return as_one(calls, "zero slots")


def _below_tis_floor(low: float, row: Row) -> bool:
    """A ratio of the row (sampled, head slot or the tail's 1 / alpha) lies below TIS's lower bound."""
    s = stats(row)
    return any(r < low for r in (s.ratio_y, 1.0 / s.alpha(DEFAULT_EPS), *s.ratio_head))


def random_tis_floor(g: torch.Generator) -> list[Call]:
    """Random batches under TIS with a positive lower bound that clips a ratio from below."""
    calls = []
    for index, (n, vocab, k) in enumerate(TIS_FLOOR_SHAPES):
        for dtype in DTYPES:
            options = TIS_FLOOR_OPTIONS[(2 * index + (dtype == F64)) % len(TIS_FLOOR_OPTIONS)]
            rows = _rows(g, n, partial(random_row, g, vocab, k), dtype, options,
                         first=partial(_below_tis_floor, options.bounds()[0]))
            rows, active = _shuffled(g, rows, _activity(g, n))
            calls.append(loss_call(assemble(rows, active, dtype), "random rows, TIS clipping from below", options,
                                   hidden=True))
    return calls


# ---------------------------------------------------------------- T0 contracts

CONTRACT_DTYPES = (F32, F64, BF16, F16)
# Explicit bounds wherever defaults are not the point (they are checked in default_arguments).
CONTRACT_OPTIONS = (NONE, Options("tis", 0.0, 2.0), Options("mis", 0.5, 5.0))


def _small(g: torch.Generator, dtype: torch.dtype, options: Options = NONE, mask_kind: str = "bool",
           shape: tuple[int, int, int] = (4, 7, 3), zero_slots: float = 0.0) -> Batch:
    return random_batch(g, *shape, dtype, options, mask_kind, zero_slots)


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in CONTRACT_DTYPES:
        for options in CONTRACT_OPTIONS:
            calls.append(loss_call(_small(g, dtype, options), "", options, requires_grad=()))
    return calls


def graph(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for options in CONTRACT_OPTIONS:
            calls.append(loss_call(_small(g, dtype, options), "logits requires grad", options))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    """An all-padding batch and a batch of no rows, each grouped with an ordinary batch. The padding holds finite
    values: NaN padding is padding_rows' clause."""
    calls = []
    for index, dtype in enumerate(DTYPES):
        for copy in range(2):
            options = CONTRACT_OPTIONS[(index + len(calls)) % 3]
            ordinary = _small(g, dtype, options)
            empty = replace(ordinary, mask=torch.zeros_like(ordinary.mask))
            group = f"empty {_name(dtype)} {copy}"
            calls.append(loss_call(empty, "every row masked", options, group=group))
            calls.append(loss_call(ordinary, "the same batch unmasked", options, group=group).as_partner())
        vocab, k = _randint(g, 4, 40), _randint(g, 1, 3)
        none_rows = Batch(torch.randn(0, vocab, generator=g, dtype=F64).to(dtype), torch.zeros(0, dtype=torch.int64),
                          torch.zeros(0, dtype=dtype), torch.zeros(0, k, dtype=torch.int64),
                          torch.zeros(0, k, dtype=dtype), torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=torch.bool))
        group = f"no rows {_name(dtype)}"
        calls.append(loss_call(none_rows, "no rows at all (N = 0)", group=group))
        calls.append(loss_call(_small(g, dtype, shape=(3, vocab, k)), "an ordinary batch", group=group).as_partner())
    return calls


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for options in CONTRACT_OPTIONS:
            # finite padding and q > 0 on every slot: NaN padding and q = 0 slots are other clauses' cases
            batch = _small(g, dtype, options, shape=(5, 9, 4))
            note = "padding rows and active rows"
            calls.append(loss_call(batch, note, options, requires_grad=()))
            strided = replace(batch, logits=batch.logits.t().contiguous().t())
            calls.append(loss_call(strided, note + ", column-major logits", options))
    return as_one(calls, "mutation")


# ---------------------------------------------------------------- T2 edge cases


def _mid_head(row: Row) -> bool:
    s = stats(row)
    return 0.3 <= s.tail_p <= 0.7 and s.tail_q >= 0.2


def full_vocab_mass(g: torch.Generator) -> list[Call]:
    """Heads holding 30-70% of p's mass and at most 80% of q's: p or q renormalized over the head is far off."""
    calls = []
    for dtype in DTYPES:
        for options in (NONE, Options("tis", 0.0, 2.0), Options("mis", 0.5, 5.0)):
            vocab, k = _randint(g, 8, 24), _randint(g, 2, 4)
            make = partial(random_row, g, vocab, k)
            rows = [draw(make, accepts(dtype, options, 0.05, _mid_head)) for _ in range(4)]
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "the head holds 30-70% of p, at most 80% of q",
                                   options))
    return calls


def _matched_anywhere(g: torch.Generator, vocab: int, k: int) -> Row:
    """alpha = 1, head ratios in [1/3, 3]; the sampled token outside the head 60% of the time."""
    return matched_head_row(g, vocab, k, 3.0, outside=float(torch.rand(1, generator=g)) < 0.6)


def centering_residual(g: torch.Generator) -> list[Call]:
    """Mode none with Q_H = P_H (alpha = 1): the correction is sum_H (q_v - p_v) log p_v, nothing else in play."""
    calls = []
    for dtype in DTYPES:
        for vocab, k in [(6, 2), (12, 4), (20, 7)]:
            batch = _batch_of(g, partial(_matched_anywhere, g, vocab, k), 5, dtype, NONE, min_residual=0.03)
            calls.append(loss_call(batch, "the head holds as much q as p (alpha = 1)", NONE))
    return calls


HEAD_WEIGHT_OPTIONS = (Options("tis", 0.0, 2.0), Options("tis", 0.0, 1.5), Options("mis", 0.5, 5.0),
                       Options("mis", 0.25, 2.0))


def _clips_a_slot(bounds: tuple[float, float], row: Row) -> bool:
    return any(not bounds[0] <= r <= bounds[1] for r in stats(row).ratio_head)


def head_weights(g: torch.Generator) -> list[Call]:
    """TIS and MIS with alpha = 1 (so alpha' = 1 however it is formed), head ratios from 1/8 to 8, many of them
    clipped or masked; the sampled token sits in the tail with ratio near 1."""
    calls = []
    for dtype in DTYPES:
        for options in HEAD_WEIGHT_OPTIONS:
            vocab, k = _randint(g, 8, 16), _randint(g, 2, 5)
            make = partial(matched_head_row, g, vocab, k, 8.0, True)
            rows = _rows(g, 4, make, dtype, options, first=partial(_clips_a_slot, options.bounds()))
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "head ratios in [1/8, 8], alpha = 1", options))
    return calls


ALPHAS = (0.15, 0.3, 2.5, 4.0, 8.0)
TAIL_WEIGHT_OPTIONS = (NONE, Options("tis", 0.0, 2.0), Options("tis", 0.0, 1.5), Options("mis", 0.5, 5.0),
                       Options("mis", 0.25, 2.0))


def logits_with_tail(g: torch.Generator, vocab: int, head: list[int], tail_mass: float, scale: float) -> Tensor:
    """Random logits [V] whose softmax puts exactly `tail_mass` (up to rounding) outside `head`."""
    logits = torch.randn(vocab, generator=g, dtype=F64) * scale
    tail = [v for v in range(vocab) if v not in head]
    head_norm = float(torch.logsumexp(logits[head], dim=0))
    logits[tail] = head_norm + math.log(tail_mass / (1 - tail_mass)) + torch.log_softmax(logits[tail], dim=0)
    return logits


def tailored_alpha_row(g: torch.Generator, vocab: int, k: int, alpha: float, outside: bool) -> Row:
    """A row whose tail masses give alpha = (1 - Q_H) / (1 - P_H) = `alpha`, both tails between 5% and 95%;
    a sampled tail token has q = alpha p, like every token of the reconstructed tail."""
    head = torch.randperm(vocab, generator=g)[:k].tolist()
    tail_p = _log_uniform(g, max(0.05, 0.05 / alpha), min(0.95, 0.95 / alpha))
    logits = logits_with_tail(g, vocab, head, tail_p, _uniform(g, 0.7, 2.0))
    p = torch.softmax(logits, dim=0)
    tail_q = alpha * (1.0 - float(p[head].sum()))
    q_head = p[head] * torch.exp(torch.randn(k, generator=g, dtype=F64) * 0.3)
    q_head = q_head * (1.0 - tail_q) / q_head.sum()
    tail = [v for v in range(vocab) if v not in head]
    if outside:
        token = tail[_sample(g, p[tail])]
        log_q_y = math.log(alpha * float(p[token]))
    else:
        slot = _randint(g, 0, k - 1)
        token, log_q_y = head[slot], math.log(float(q_head[slot]))
    return Row(logits, token, log_q_y, tuple(head), tuple(math.log(float(x)) for x in q_head), _advantage(g))


def tail_weight(g: torch.Generator) -> list[Call]:
    """alpha far from 1, in every mode: the tail's coefficient is alpha * f(1 / alpha)."""
    calls = []
    for dtype in DTYPES:
        for options in TAIL_WEIGHT_OPTIONS:
            rows = []
            vocab, k = _randint(g, 8, 14), _randint(g, 1, 3)
            for index in range(4):
                alpha = ALPHAS[(index + len(calls)) % len(ALPHAS)]
                make = partial(tailored_alpha_row, g, vocab, k, alpha, index % 2 == 0)
                rows.append(draw(make, accepts(dtype, options, 0.02)))
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "alpha from 0.15 to 8", options))
    return calls


def peaked_row(g: torch.Generator, vocab: int, k: int, tail_logit: float) -> Row:
    """p holds almost all of its mass on the head (tail logits near `tail_logit`, 1 - P_H far below eps);
    q keeps a tail of 5-40%."""
    logits = torch.randn(vocab, generator=g, dtype=F64)
    head = torch.randperm(vocab, generator=g)[:k].tolist()
    tail = [v for v in range(vocab) if v not in head]
    logits[tail] = tail_logit - torch.rand(len(tail), generator=g, dtype=F64) * 3
    q = torch.softmax(logits.clamp(min=-3.0) + torch.randn(vocab, generator=g, dtype=F64) * 0.5, dim=0)
    tail_q = _uniform(g, 0.05, 0.4)
    q[head] *= (1 - tail_q) / q[head].sum()
    q[tail] *= tail_q / q[tail].sum()
    token = _sample(g, q)
    return Row(logits, token, math.log(float(q[token])), tuple(head), tuple(math.log(float(q[v])) for v in head),
               _advantage(g))


def truncated_row(g: torch.Generator, vocab: int, k: int, excess: float) -> Row:
    """q lives on its head only (Q_H = 1 + excess, within the allowed slack): 1 - Q_H is 0 or negative."""
    logits, q = distributions(g, vocab, _uniform(g, 0.7, 1.5), _uniform(g, 0.3, 1.0))
    head = q.argsort(descending=True)[:k].tolist()
    q_head = q[head] * (1.0 + excess) / q[head].sum()
    slot = _sample(g, q_head)
    return Row(logits, head[slot], math.log(float(q_head[slot])), tuple(head),
               tuple(math.log(float(x)) for x in q_head), _advantage(g))


def full_head_row(g: torch.Generator, vocab: int) -> Row:
    """k = V: the head is the whole vocabulary, alpha is floored on both sides."""
    logits, q = distributions(g, vocab, _uniform(g, 0.5, 2.0), _uniform(g, 0.3, 1.2))
    head = torch.randperm(vocab, generator=g).tolist()
    token = _sample(g, q)
    return Row(logits, token, math.log(float(q[token])), tuple(head), tuple(math.log(float(q[v])) for v in head),
               _advantage(g))


def worked_example_row(g: torch.Generator) -> Row:
    """The statement's example: p = (0.6, 0.4), q = (0.5, 0.5), both tokens in the head."""
    shift = _uniform(g, -3.0, 3.0)
    logits = torch.tensor([math.log(0.6), math.log(0.4)], dtype=F64) + shift
    head = (0, 1) if float(torch.rand(1, generator=g)) < 0.5 else (1, 0)
    return Row(logits, _randint(g, 0, 1), math.log(0.5), head, (math.log(0.5), math.log(0.5)), _advantage(g))


FLOOR_OPTIONS = (NONE, Options("tis", 0.0, 2.0), Options("mis", 0.5, 5.0))
FLOOR_EPS = {F64: 1e-6, F32: 1e-2}
FLOOR_TAIL_LOGIT = {F64: -30.0, F32: -14.0}


def alpha_floors(g: torch.Generator) -> list[Call]:
    """Tails that vanish: 1 - P_H below eps, 1 - Q_H zero or slightly negative, whole-vocabulary heads, and the
    statement's two-token example. eps is given explicitly (1e-6 in float64, 1e-2 in float32)."""
    calls = []
    for dtype in DTYPES:
        for index, base in enumerate(FLOOR_OPTIONS):
            options = replace(base, eps=FLOOR_EPS[dtype])
            vocab, k = _randint(g, 6, 12), _randint(g, 2, 4)
            excess = (0.0, 5e-5, 2e-5)[index]
            makers: list[tuple[str, Callable[[], Row]]] = [
                ("p's tail below eps", partial(peaked_row, g, vocab, k, FLOOR_TAIL_LOGIT[dtype])),
                ("q's head holds all of q", partial(truncated_row, g, vocab, k, excess)),
            ]
            for note, make in makers:
                rows = _rows(g, 4, make, dtype, options)
                calls.append(loss_call(assemble(rows, [True] * 4, dtype), note, options))
            full = _rows(g, 3, partial(full_head_row, g, vocab), dtype, options)
            calls.append(loss_call(assemble(full, [True] * 3, dtype), "the head is the whole vocabulary", options))
        example = [worked_example_row(g) for _ in range(3)]
        options = Options("none", eps=FLOOR_EPS[dtype])
        calls.append(loss_call(assemble(example, [True] * 3, dtype), "p = (0.6, 0.4), q = (0.5, 0.5)", options))
    return as_one(calls, "alpha floors")


ZERO_SLOT_OPTIONS = (NONE, Options("tis", 0.0, 2.0), Options("mis", 0.5, 5.0), Options("mis", 0.2, 3.0),
                     Options("mis", 0.2, 2.0))


def _has_zero_slot(row: Row) -> bool:
    return NEG_INF in row.log_q_head


def zero_q_slots(g: torch.Generator) -> list[Call]:
    """Head slots the sampler recorded with q = 0 (log q = -inf): their q * f(p / q) is 0, never 0 * inf."""
    calls = []
    for dtype in DTYPES:
        for options in ZERO_SLOT_OPTIONS:
            vocab, k = _randint(g, 8, 20), _randint(g, 3, 5)
            rows = _rows(g, 4, partial(random_row, g, vocab, k, 0.5), dtype, options, every=_has_zero_slot)
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "head slots with q = 0", options))
    return as_one(calls, "zero-q slots")


SAMPLED_OPTIONS = (Options("tis", 0.0, 2.0), Options("tis", 0.0, 1.5), Options("mis", 0.5, 5.0),
                   Options("mis", 0.5, 2.0))


def with_sampled_ratio(row: Row, rho: float) -> Row:
    """The row with q_y = p_y / rho for a tail token, so its ratio p_y / q_y is rho."""
    logp_y = float(torch.log_softmax(row.logits, dim=0)[row.token])
    return replace(row, log_q_y=logp_y - math.log(rho))


def _sampled_ratio_row(g: torch.Generator, vocab: int, k: int, low: float, high: float) -> Row:
    """alpha = 1, head ratios in [1/4, 4], a tail token sampled with ratio log-uniform in [low, high]."""
    return with_sampled_ratio(matched_head_row(g, vocab, k, 4.0, True), _log_uniform(g, low, high))


def _fits_tail(row: Row) -> bool:
    return math.exp(row.log_q_y) <= 0.9 * stats(row).tail_q  # q_y is part of the tail's mass


def _weight_acts(bounds: tuple[float, float], row: Row) -> bool:
    return not bounds[0] <= stats(row).ratio_y <= bounds[1]


def sampled_weight(g: torch.Generator) -> list[Call]:
    """The sampled token's weight f(p_y / q_y), with p_y the current policy's: ratios from 1/10 to 10, half of
    them clipped or masked; the token sits inside the head or outside it."""
    calls = []
    for dtype in DTYPES:
        for options in SAMPLED_OPTIONS:
            vocab, k = _randint(g, 8, 16), _randint(g, 2, 4)
            make = partial(_sampled_ratio_row, g, vocab, k, 0.1, 10.0)
            rows = _rows(g, 3, make, dtype, options, 0.02, first=partial(_weight_acts, options.bounds()),
                         every=_fits_tail)
            rows.append(draw(partial(matched_head_row, g, vocab, k, 4.0, False), accepts(dtype, options)))
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "sampled ratios from 1/10 to 10", options))
    return calls


# ---------------------------------------------------------------- MIS bounds hit exactly (float64)

TIED_VOCAB = 8
LOW_LOGIT = -45.0  # e^-45 is below half an ulp of 2 / 8: the two tied tokens' normalizer is exactly 2
INCLUSIVE_BOUNDS = ((1.0, 5.0), (0.5, 1.0), (1.0, 1.0))


def tied_logits(g: torch.Generator) -> tuple[Tensor, list[int], Tensor]:
    """float64 logits with two tokens at 0 (p = 1/2 each, exactly) and six far below; log p, and the ids
    of the tied tokens first. log_softmax returns these log p bit for bit however it is written."""
    logits = LOW_LOGIT - torch.rand(TIED_VOCAB, generator=g, dtype=F64) * 8
    order = torch.randperm(TIED_VOCAB, generator=g).tolist()
    logits[order[:2]] = 0.0
    logp = torch.log_softmax(logits, dim=0)
    assert float(torch.exp(logp[order[0]])) == 0.5 and float(logp[order[0]]) == float(logp[order[1]])
    return logits, order, logp


def sampled_on_bound_row(g: torch.Generator) -> Row:
    """The sampled token has q_y = p_y exactly: its ratio is exactly 1."""
    logits, (a, b, c, *_), logp = tied_logits(g)
    q_b, q_c = (0.2, 0.25, 0.3)[_randint(g, 0, 2)], _uniform(g, 0.05, 0.2)
    return Row(logits, a, float(logp[a]), (b, c), (math.log(q_b), math.log(q_c)), _advantage(g))


def slot_on_bound_row(g: torch.Generator) -> Row:
    """A head slot recorded with q_v = p_v exactly: its ratio is exactly 1."""
    logits, (a, _, c, d, *_), logp = tied_logits(g)
    rho = (0.3, 2.0, 8.0)[_randint(g, 0, 2)]
    q_c = _uniform(g, 0.05, 0.3)
    return Row(logits, d, float(logp[d]) - math.log(rho), (a, c), (float(logp[a]), math.log(q_c)), _advantage(g))


def mis_inclusive_bounds(g: torch.Generator) -> list[Call]:
    """Ratios exactly 1 (q = p bit for bit) against MIS bounds at 1: inclusive bounds keep them."""
    calls = []
    for low, high in INCLUSIVE_BOUNDS:
        options = Options("mis", low, high)
        rows = [sampled_on_bound_row(g), slot_on_bound_row(g), sampled_on_bound_row(g), slot_on_bound_row(g)]
        rows, active = _shuffled(g, rows, [True] * 4)
        calls.append(loss_call(assemble(rows, active, F64), "ratios exactly 1 on a bound", options))
    return calls


# ---------------------------------------------------------------- defaults


def _spread_row(g: torch.Generator, vocab: int, k: int) -> Row:
    """alpha = 1, head ratios in [1/8, 8], the sampled token's ratio in [1/8, 8]."""
    for _ in range(TRIES):
        row = with_sampled_ratio(matched_head_row(g, vocab, k, ratio_spread=8.0, outside=True),
                                 _log_uniform(g, 0.125, 8.0))
        if math.exp(row.log_q_y) <= 0.9 * stats(row).tail_q:
            return row
    raise RuntimeError("no sampled ratio fits the tail")


def _tells_bounds_apart(row: Row, ours: tuple[float, float], other: tuple[float, float]) -> bool:
    s = stats(row)
    return any((ours[0] <= r <= ours[1]) != (other[0] <= r <= other[1]) or min(max(r, ours[0]), ours[1]) != min(
        max(r, other[0]), other[1]) for r in (s.ratio_y, *s.ratio_head))


def tiny_tail_row(g: torch.Generator, vocab: int, k: int, tail_mass: float) -> Row:
    """p's tail holds `tail_mass` in all (between the default eps and a hundred times less), q's tail 5-40%."""
    row = peaked_row(g, vocab, k, 0.0)
    return replace(row, logits=logits_with_tail(g, vocab, list(row.head), tail_mass, 1.0))


def default_arguments(g: torch.Generator) -> list[Call]:
    """Omitted arguments: mode "none"; TIS bounds (0, 2) and MIS bounds (0.5, 5), also when only one of them is
    given; eps = 1e-6 where p's tail mass lies between 1e-8 and 1e-6."""
    calls = []
    for dtype in DTYPES:
        vocab, k = _randint(g, 8, 16), _randint(g, 2, 4)
        calls.append(loss_call(_small(g, dtype, Options(None), shape=(4, vocab, k)), "", Options(None)))
        for options, other in [(Options("tis"), (0.5, 5.0)), (Options("mis"), (0.0, 2.0)),
                               (Options("tis", high=1.5), (0.5, 1.5)), (Options("mis", high=3.0), (0.0, 3.0))]:
            apart = partial(_tells_bounds_apart, ours=options.bounds(), other=other)
            rows = _rows(g, 4, partial(_spread_row, g, vocab, k), dtype, options, 0.02, first=apart)
            calls.append(loss_call(assemble(rows, [True] * 4, dtype), "ratios from 1/8 to 8", options))
    eps_rows = [tiny_tail_row(g, 10, 3, _log_uniform(g, 3e-8, 3e-7)) for _ in range(3)]
    calls.append(loss_call(assemble(eps_rows, [True] * 3, F64), "p's tail mass between 3e-8 and 3e-7",
                           Options("none")))
    return calls


# ---------------------------------------------------------------- gradients, padding, dtypes, layouts

ALL_FLOATS = ("logits", "rollout_logp", "rollout_head_logp", "advantages")


def stop_gradient(g: torch.Generator) -> list[Call]:
    """Every floating input requires grad; only logits may receive one."""
    calls = []
    for dtype in DTYPES:
        for options in (NONE, Options("tis", 0.0, 1.5), Options("mis", 0.5, 2.0)):
            batch = _small(g, dtype, options, shape=(5, 10, 4))
            calls.append(loss_call(batch, "logits, rollout_logp, rollout_head_logp and advantages require grad",
                                   options, requires_grad=ALL_FLOATS))
    return as_one(calls, "stop-gradient")


PADDING_FILLS = {
    "NaN everywhere": (math.nan, math.nan, math.nan, math.nan),
    "logits +-inf, rollout -inf, head log q +inf, advantage NaN": (math.inf, NEG_INF, math.inf, math.nan),
    "logits NaN, head log q 0 (head mass k > 1), advantage inf": (math.nan, math.nan, 0.0, math.inf),
}


def padding_rows(g: torch.Generator) -> list[Call]:
    """Masked rows hold NaN, infinities and impossible head masses: they give exactly 0 and zero gradients."""
    calls = []
    for dtype in DTYPES:
        for index, (note, (logit, rollout, head, adv)) in enumerate(PADDING_FILLS.items()):
            options = CONTRACT_OPTIONS[index]
            vocab, k = _randint(g, 6, 12), _randint(g, 2, 4)
            rows = _rows(g, 6, partial(random_row, g, vocab, k), dtype, options)
            rows, active = _shuffled(g, rows, [True, True, True, False, False, False])
            batch = assemble(rows, active, dtype)
            logits, rl = batch.logits.clone(), batch.rollout_logp.clone()
            hl, av = batch.rollout_head_logp.clone(), batch.advantages.clone()
            for i in (~batch.mask).nonzero().flatten().tolist():
                logits[i] = logit
                if logit == math.inf:
                    logits[i, ::2] = NEG_INF
                rl[i], hl[i], av[i] = rollout, head, adv
            batch = replace(batch, logits=logits, rollout_logp=rl, rollout_head_logp=hl, advantages=av)
            calls.append(loss_call(batch, f"padding rows: {note}", options))
    return calls


def input_dtypes(g: torch.Generator) -> list[Call]:
    """Masks of every dtype, int32 and int16 ids, and float64 recorded values next to float32 logits."""
    calls = []
    for index, kind in enumerate(MASK_KINDS):
        dtype = DTYPES[index % 2]
        options = CONTRACT_OPTIONS[index % 3]
        vocab, k = _randint(g, 6, 12), _randint(g, 2, 4)
        rows = _rows(g, 5, partial(random_row, g, vocab, k), dtype, options)
        rows, active = _shuffled(g, rows, _activity(g, 5))
        id_dtype = (torch.int64, torch.int32, torch.int16)[index % 3]
        other = F64 if dtype == F32 and index % 2 == 0 else None
        batch = assemble(rows, active, dtype, kind, other_dtype=other, id_dtype=id_dtype)
        note = f"{_name(id_dtype)} ids" + (", float64 rollout values and advantages" if other else "")
        calls.append(loss_call(batch, note, options))
    return as_one(calls, "input dtypes")


def thin_tail_row(g: torch.Generator, vocab: int, k: int, dtype: torch.dtype) -> Row:
    """Logits rounded to `dtype` whose tail holds 1-3% of p while q's tail holds 10-30%: alpha near 10, and
    1 - P_H loses most of its digits if it is computed in half precision."""
    head = torch.randperm(vocab, generator=g)[:k].tolist()
    logits = logits_with_tail(g, vocab, head, _uniform(g, 0.01, 0.03), _uniform(g, 0.5, 1.5)).to(dtype).to(F64)
    p = torch.softmax(logits, dim=0)
    tail_q = _uniform(g, 0.1, 0.3)
    q = p.clone()
    q[head] *= torch.exp(torch.randn(k, generator=g, dtype=F64) * 0.2)  # head ratios near 1, not exactly
    q[head] *= (1.0 - tail_q) / float(q[head].sum())
    tail = [v for v in range(vocab) if v not in head]
    q[tail] *= tail_q / float(q[tail].sum())
    token = _sample(g, q)
    return Row(logits, token, math.log(float(q[token])), tuple(head), tuple(math.log(float(q[v])) for v in head),
               _advantage(g))


def low_precision(g: torch.Generator) -> list[Call]:
    """bfloat16 and float16 logits (recorded values in float32) with thin tails: computed in float32, returned in
    the logits' dtype."""
    calls = []
    for dtype in (BF16, F16):
        for options in (NONE, Options("tis", 0.0, 1.1), Options("mis", 0.5, 5.0)):
            vocab, k = _randint(g, 8, 16), _randint(g, 2, 4)
            batch = _batch_of(g, partial(thin_tail_row, g, vocab, k, dtype), 5, dtype, options)
            calls.append(loss_call(batch, "1-3% of p in the tail", options))
    return as_one(calls, "low precision")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for options in (NONE, Options("mis", 0.5, 2.0)):
            batch = _small(g, dtype, options, shape=(6, 10, 4))
            strided = Batch(
                logits=batch.logits.t().contiguous().t(),
                tokens=torch.stack([batch.tokens, batch.tokens], dim=1)[:, 1],
                rollout_logp=torch.stack([batch.rollout_logp, batch.advantages], dim=1)[:, 0],
                head_ids=batch.head_ids.t().contiguous().t(),
                rollout_head_logp=torch.stack([batch.rollout_head_logp, batch.advantages[:, None].expand(-1, 4)],
                                              dim=2)[:, :, 0],
                advantages=torch.stack([batch.rollout_logp, batch.advantages], dim=1)[:, 1],
                mask=torch.stack([batch.mask, batch.mask], dim=1)[:, 0],
            )
            assert not strided.logits.is_contiguous() and not strided.head_ids.is_contiguous()
            calls.append(loss_call(strided, "transposed and strided views", options))
    return calls


def _with_value(t: Tensor, index: tuple[int, ...], value: float) -> Tensor:
    out = t.clone()
    out[index] = value
    return out


class _Bad:
    """The ordinary batch every must-raise call of one seed spoils in one place, and the rows it spoils."""

    def __init__(self, g: torch.Generator) -> None:
        self.vocab, self.k = _randint(g, 6, 10), 3
        self.batch = _small(g, F32, NONE, shape=(4, self.vocab, self.k))
        active = self.batch.mask.nonzero().flatten().tolist()
        self.row = active[0]
        self.padded = 1 + active[0] if 1 + active[0] < 4 else 0


def _must_raise(g: torch.Generator, bad: _Bad, raising: list[tuple[str, dict[str, object]]]) -> list[Call]:
    """Each must-raise call grouped with an ordinary valid call (mode none, default bounds) that must answer right:
    the group defeats an answer that always raises or is not the statement's function, and the valid call meets no
    convention's edge, so only a formula misreading, diagnosed and credited where it is not owned, fails it."""
    groups = []
    for label, change in raising:
        wrong = Call(FUNCTION, {**bad.batch.kwargs(), **change}, f"{FUNCTION}: {label} must raise ValueError")
        fresh = _small(g, F32, NONE, shape=(4, bad.vocab, bad.k))
        good = Call(FUNCTION, fresh.kwargs(), f"{FUNCTION}: an ordinary batch is valid")
        groups.append([wrong, good] if bool(torch.rand(1, generator=g) < 0.5) else [good, wrong])
    # which positions must raise is drawn from the seed too
    return as_one([call for i in torch.randperm(len(groups), generator=g).tolist() for call in groups[i]], "errors")


def errors_shapes(g: torch.Generator) -> list[Call]:
    """Shapes that disagree and tensors of the wrong kind (integer where floating, floating where integer)."""
    bad = _Bad(g)
    b, k = bad.batch, bad.k
    return _must_raise(g, bad, [
        ("logits 1-D", {"logits": b.logits[0]}),
        ("logits 3-D", {"logits": b.logits[None]}),
        ("logits int64", {"logits": b.logits.round().to(torch.int64)}),
        ("tokens [N + 1]", {"tokens": torch.cat([b.tokens, b.tokens[:1]])}),
        ("tokens float32", {"tokens": b.tokens.to(F32)}),
        ("rollout_logp [N, 1]", {"rollout_logp": b.rollout_logp[:, None]}),
        ("head_ids 1-D", {"head_ids": b.head_ids[:, 0], "rollout_head_logp": b.rollout_head_logp[:, 0]}),
        ("head_ids float32", {"head_ids": b.head_ids.to(F32)}),
        ("rollout_head_logp [N, k + 1]", {"rollout_head_logp": torch.cat([b.rollout_head_logp] * 2, 1)[:, :k + 1]}),
        ("advantages [N + 1]", {"advantages": torch.cat([b.advantages, b.advantages[:1]])}),
        ("mask [N, 1]", {"mask": b.mask[:, None]}),
        ("rollout_logp int64", {"rollout_logp": b.rollout_logp.round().to(torch.int64)}),
        ("advantages int64", {"advantages": b.advantages.round().to(torch.int64)}),
    ])


def errors_ids(g: torch.Generator) -> list[Call]:
    """Token and head ids outside [0, V), and a head row that repeats an id."""
    bad = _Bad(g)
    b, row, vocab = bad.batch, bad.row, bad.vocab
    return _must_raise(g, bad, [
        ("a token id equal to V", {"tokens": _with_value(b.tokens, (row,), vocab)}),
        ("a token id of -1", {"tokens": _with_value(b.tokens, (row,), -1)}),
        ("a head id equal to V", {"head_ids": _with_value(b.head_ids, (row, 2), vocab)}),
        ("a repeated head id", {"head_ids": _with_value(b.head_ids, (row, 1), int(b.head_ids[row, 0]))}),
    ])


def errors_mode(g: torch.Generator) -> list[Call]:
    """A mode that is not exactly "none", "tis" or "mis"."""
    bad = _Bad(g)
    return _must_raise(g, bad, [("mode 'MIS'", {"mode": "MIS"}), ("mode 'clip'", {"mode": "clip"}),
                                ("mode 'tis '", {"mode": "tis "}), ("mode ''", {"mode": ""}),
                                ("mode 'Tis'", {"mode": "Tis"})])


def errors_bounds(g: torch.Generator) -> list[Call]:
    """TIS and MIS bounds, after defaults, that are not finite or not 0 <= low <= high with high > 0."""
    bad = _Bad(g)
    return _must_raise(g, bad, [
        ("tis with low = -0.1", {"mode": "tis", "low": -0.1}),
        ("mis with high = inf", {"mode": "mis", "high": math.inf}),
        ("mis with low = NaN", {"mode": "mis", "low": math.nan}),
        ("tis with low = 1.5 > high = 1.2", {"mode": "tis", "low": 1.5, "high": 1.2}),
        ("mis with high = 0.3 below the default low", {"mode": "mis", "high": 0.3}),
        ("tis with low = high = 0", {"mode": "tis", "low": 0.0, "high": 0.0}),
    ])


def errors_records(g: torch.Generator) -> list[Call]:
    """An active row whose head holds more than all of q, or that holds NaN."""
    bad = _Bad(g)
    b, row = bad.batch, bad.row
    return _must_raise(g, bad, [
        ("sum of q over the head 1.65 on an active row",
         {"rollout_head_logp": _with_value(b.rollout_head_logp, (row,), math.log(0.55))}),
        ("NaN in logits on an active row", {"logits": _with_value(b.logits, (row, 1), math.nan)}),
        ("NaN rollout_logp on an active row", {"rollout_logp": _with_value(b.rollout_logp, (row,), math.nan)}),
        ("NaN head log q on an active row",
         {"rollout_head_logp": _with_value(b.rollout_head_logp, (row, 0), math.nan)}),
        ("NaN advantage on an active row", {"advantages": _with_value(b.advantages, (row,), math.nan)}),
    ])


VALID_EDGES: tuple[tuple[str, Options], ...] = (
    ("tis with low = high = 1", Options("tis", 1.0, 1.0)),
    ("mis with low = 0", Options("mis", 0.0, 1.5)),
    ("mis with integer bounds 1 and 3", Options("mis", 1, 3)),
    ("mis with high = 1e6", Options("mis", 0.5, 1e6)),
    ("tis with integer bounds 0 and 2", Options("tis", 0, 2)),
)


def valid_edges(g: torch.Generator) -> list[Call]:
    """Calls at the edges of the contract that must not raise: bounds that meet, a zero or integer bound, a huge
    high, a padding row whose head holds more than all of q, token ids 0 and V - 1, no head (k = 0), k = V."""
    bad = _Bad(g)
    b, vocab = bad.batch, bad.vocab
    calls = [loss_call(_small(g, F32, options, shape=(4, vocab, bad.k)), label, options)
             for label, options in VALID_EDGES]
    heavy = _with_value(b.rollout_head_logp, (bad.padded,), math.log(0.55))
    padded = replace(b, rollout_head_logp=heavy, mask=_with_value(b.mask, (bad.padded,), False))
    calls.append(loss_call(padded, "sum of q over the head 1.65 on a padding row"))
    fresh = _small(g, F32, NONE, shape=(4, vocab, bad.k))
    tokens = fresh.tokens.clone()
    tokens[torch.randperm(4, generator=g)[:2]] = torch.tensor([0, vocab - 1])
    calls.append(loss_call(replace(fresh, tokens=tokens), "token ids 0 and V - 1"))
    # no head is the uncentred loss, which an uncentred answer gets right: it passes only beside a whole head
    headless = random_batch(g, 4, vocab, 0, F64, Options("tis", 0.0, 2.0), min_residual=0.0)
    calls.append(loss_call(headless, "no head (k = 0)", Options("tis", 0.0, 2.0), group="heads at both ends"))
    full = _rows(g, 3, partial(full_head_row, g, vocab), F64, NONE)
    calls.append(loss_call(assemble(full, [True] * 3, F64), "the head is the whole vocabulary (k = V)",
                           group="heads at both ends"))
    return as_one(calls, "valid edges")


# ---------------------------------------------------------------- T3: the toy's own inputs, graded by autograd

TOY_LOGITS = (1.0, 0.3, -0.5, 0.8, -1.2, 0.1)  # the head sweep's prefix (experiment.py)
TOY_Q = (0.05, 0.10, 0.05, 0.60, 0.05, 0.15)
TOY_MODES = (NONE, Options("tis", 0.0, 1.5), Options("mis", 0.5, 2.0))


def _toy_call(logits: Tensor, q: Tensor, head: list[int], advantages: Tensor, options: Options, note: str) -> Call:
    """Every token y of one prefix sampled once, one row each: backward of the summed losses gives each row's
    own gradient, since a row's loss depends on its own logits only."""
    vocab = logits.shape[0]
    ids = torch.tensor(head, dtype=torch.int64)
    log_q = torch.log(q)
    batch = Batch(
        logits=logits[None, :].expand(vocab, vocab).clone(),
        tokens=torch.arange(vocab),
        rollout_logp=log_q.clone(),
        head_ids=ids[None, :].expand(vocab, len(head)).clone(),
        rollout_head_logp=log_q[ids][None, :].expand(vocab, len(head)).clone(),
        advantages=advantages.clone(),
        mask=torch.ones(vocab, dtype=torch.bool),
    )
    return loss_call(batch, note, options)


def toy_gradients(g: torch.Generator) -> list[Call]:
    """The head sweep's prefix for k = 0..5 in every mode, and the bandit's two actions with and without the head
    {action 0}: the gradient the toy's curves assume, taken through the learner's loss."""
    vocab = len(TOY_LOGITS)
    order = torch.randperm(vocab, generator=g)
    logits, q = torch.zeros(vocab, dtype=F64), torch.zeros(vocab, dtype=F64)
    logits[order] = torch.tensor(TOY_LOGITS, dtype=F64) + _uniform(g, -2.0, 2.0)
    q[order] = torch.tensor(TOY_Q, dtype=F64)
    ranked = [int(order[v]) for v in sorted(range(vocab), key=lambda v: (-TOY_Q[v], v))]
    advantages = torch.full((vocab,), _advantage(g), dtype=F64)
    # one group per curve: without a head (k = 0) the correction vanishes, so an uncentred loss matches there and
    # must not earn that case apart from the rest of its curve; the whole-vocabulary head (k = V) is left to
    # alpha_floors, whose clause it meets
    calls = [replace(_toy_call(logits, q, ranked[:k], advantages, options,
                                           f"the head sweep's prefix, head of size {k}"), group=f"sweep {options.mode}")
             for options in TOY_MODES for k in range(vocab)]
    p0, q0 = _uniform(g, 0.55, 0.8), _uniform(g, 0.25, 0.45)
    better = _uniform(g, 0.8, 1.2)
    rewards = torch.tensor([better, 0.9 * better], dtype=F64)
    bandit_logits = torch.tensor([math.log(p0), math.log(1.0 - p0)], dtype=F64)
    bandit_q = torch.tensor([q0, 1.0 - q0], dtype=F64)
    for head in ([], [0]):
        call = _toy_call(bandit_logits, bandit_q, head, rewards, NONE, f"the bandit, head {head}")
        calls.append(replace(call, group="bandit"))
    return calls


def float64_precision(g: torch.Generator) -> list[Call]:
    """Ordinary float64 batches in each mode: a loss computed in float64 agrees with the reference to 1e-9, one
    computed in float32 and cast back does not."""
    return [loss_call(_small(g, F64, options, shape=(4, 12, 3)), "float64 arithmetic", options)
            for options in (NONE, Options("tis", 0.0, 1.5), Options("mis", 0.5, 2.0))]
