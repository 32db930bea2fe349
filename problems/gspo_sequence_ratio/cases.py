"""Case generators for gspo_sequence_ratio: each takes a seeded torch.Generator and returns the calls to make.

A response's s_i is placed in a region relative to the clip bounds (below, inside, above), and its tokens'
log-ratios scatter around log s_i with zero-mean noise: only the mean over the valid tokens gives s_i. Padding holds
random finite values unless a case says otherwise; every batch holds padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from grader.judge.cases import Call

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
PAPER = (3e-4, 4e-4)  # the paper's widths, the defaults
# equal widths wherever the widths are not the clause: a clipped response's loss shows which width sets which bound
EQUAL = (4e-4, 4e-4)
SYMMETRIC = [(2e-4, 2e-4), (3e-4, 3e-4), (0.2, 0.2), (0.05, 0.05)]
RATIO, LOSS, TOKEN = "sequence_ratio", "gspo_loss", "gspo_token_ratio"
Kwargs = dict[str, object]


def _u(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def _randint(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (), generator=g))


def region(g: torch.Generator, kind: str, eps: tuple[float, float]) -> float:
    """A sequence ratio below 1 - eps_low, inside the interval, or above 1 + eps_high, clear of both bounds and of
    the bounds the widths would set swapped (which width sets which bound is asymmetric_eps's alone)."""
    wide, narrow = max(eps), min(eps)
    if kind == "below":
        return (1 - wide) * (1 - wide * _u(g, 0.3, 2.0))
    if kind == "above":
        return (1 + wide) * (1 + wide * _u(g, 0.3, 2.0))
    return _u(g, 1 - 0.7 * narrow, 1 + 0.7 * narrow)


def batch(g: torch.Generator, ratios: Sequence[float], lengths: Sequence[int], cols: int, dtype: torch.dtype,
          sigma: float | None = None, pad: tuple[float, float] | None = None, shift: float = 0.0) -> Kwargs:
    """Row i: lengths[i] valid tokens at random positions whose log-ratios are log(ratios[i]) plus zero-mean noise
    of scale `sigma` (drawn when None, clamped to +-16); padding holds `pad` (logp, old_logp) or random values."""
    rows = len(ratios)
    sigma = _u(g, 0.05, 0.5) if sigma is None else sigma
    old = shift - _u(g, 0.05, 4.0) - torch.rand(rows, cols, generator=g, dtype=F64) * 2.0  # [B, L]
    log_ratio = torch.zeros(rows, cols, dtype=F64)
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for i, (r, n) in enumerate(zip(ratios, lengths, strict=True)):
        where = torch.randperm(cols, generator=g)[:n]
        noise = (sigma * torch.randn(n, generator=g, dtype=F64)).clamp(-16.0, 16.0)
        log_ratio[i, where] = math.log(r) + noise - (noise.mean() if n else 0.0)
        mask[i, where] = True
    if pad is None:
        pad_logp, pad_old = -torch.rand(rows, cols, generator=g, dtype=F64) * 3, -torch.rand(rows, cols, generator=g)
    else:
        pad_logp, pad_old = torch.full((rows, cols), pad[0]), torch.full((rows, cols), pad[1])
    logp = torch.where(mask, old + log_ratio, pad_logp.to(F64)).to(dtype)
    return {"logp": logp, "old_logp": torch.where(mask, old, pad_old.to(F64)).to(dtype), "mask": mask}


def with_advantages(g: torch.Generator, kw: Kwargs, signs: Sequence[float]) -> Kwargs:
    dtype = kw["logp"].dtype  # type: ignore[attr-defined]
    values = [s * math.exp(_u(g, math.log(0.3), math.log(2.5))) for s in signs]
    # widths passed explicitly: what an omitted width means is default_widths's alone
    return {"eps_low": EQUAL[0], "eps_high": EQUAL[1], **kw, "advantages": torch.tensor(values, dtype=dtype)}


def call(function: str, kw: Kwargs, note: str, grad: tuple[str, ...] = ("logp",), backward: bool | Tensor = True,
         hidden: bool = False, group: str | None = None) -> Call:
    logp, mask = kw["logp"], kw["mask"]
    assert isinstance(logp, Tensor) and isinstance(mask, Tensor)
    options = ", ".join(f"{k}={v:g}" for k, v in kw.items() if isinstance(v, float))
    label = f"{function} {str(logp.dtype)[6:]} {list(logp.shape)} {str(mask.dtype)[6:]} mask {options}: {note}"
    kwargs = {k: v for k, v in kw.items() if function == LOSS or k not in ("advantages", "eps_low", "eps_high")}
    if function == TOKEN and backward is True:  # a loss sums valid tokens only: padding's cotangent is 0
        backward = (mask != 0).to(logp.dtype)
    return Call(function, kwargs, label, requires_grad=grad, backward=backward if grad else False, hidden=hidden,
                group=group)


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, eps: tuple[float, float],
                 ) -> Kwargs:
    """Ragged batch (B >= 3) where every branch is taken: A > 0 above (clipped), A < 0 below (clipped), A > 0
    below (not clipped), the rest drawn; one response left short of L."""
    rows, cols = shape
    kinds = ["above", "below", "below"] + [("below", "inside", "above")[_randint(g, 0, 2)] for _ in range(rows - 3)]
    signs = [1.0, -1.0, 1.0] + [(1.0, -1.0)[_randint(g, 0, 1)] for _ in range(rows - 3)]
    lengths = [_randint(g, 1, cols) for _ in range(rows)]
    lengths[_randint(g, 0, rows - 1)] = min(lengths[0], cols - 1)
    order = torch.randperm(rows, generator=g).tolist()
    ratios = [region(g, kinds[i], eps) for i in order]
    kw = batch(g, ratios, lengths, cols, dtype)
    return with_advantages(g, {**kw, "eps_low": eps[0], "eps_high": eps[1]}, [signs[i] for i in order])


RANDOM_SHAPES = [(3, 6), (4, 5), (5, 9), (7, 6), (12, 5), (8, 33), (16, 64)]


def _random(g: torch.Generator, function: str) -> list[Call]:
    calls = []
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            eps = SYMMETRIC[(2 * index + (dtype == F64)) % len(SYMMETRIC)]
            kw = random_batch(g, shape, dtype, eps)
            calls.append(call(function, kw, "random ragged batch", hidden=True))
    return calls


def random_ratio(g: torch.Generator) -> list[Call]:
    return _random(g, RATIO)


def random_loss(g: torch.Generator) -> list[Call]:
    return _random(g, LOSS)


def random_token_ratio(g: torch.Generator) -> list[Call]:
    return _random(g, TOKEN)


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    for function in (RATIO, LOSS, TOKEN):
        for dtype, kind in ((F32, torch.bool), (F64, torch.float64), (F32, torch.int32)):
            kw = random_batch(g, (4, 6), dtype, EQUAL)
            calls.append(call(function, {**kw, "mask": kw["mask"].to(kind)}, "an ordinary batch"))  # type: ignore
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    """Every token masked, grouped with an ordinary batch (NaN padding is padding_nan_inf's)."""
    calls = []
    for function in (RATIO, LOSS, TOKEN):
        for dtype in DTYPES:
            group = f"empty {dtype}"
            kw = random_batch(g, (4, 7), dtype, EQUAL)
            empty = {**kw, "mask": torch.zeros(4, 7, dtype=torch.bool)}
            calls.append(call(function, empty, "every token masked", group=group))
            calls.append(call(function, kw, "an ordinary batch", group=group).as_partner())
    return calls


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for function in (RATIO, LOSS, TOKEN):
        for dtype in DTYPES:
            kw = random_batch(g, (3, 6), dtype, EQUAL)
            calls.append(call(function, kw, "padding a solution might clean in place", grad=()))
    return calls


def token_stop_gradient(g: torch.Generator) -> list[Call]:
    """A random cotangent: sg[s_i] * pi_t / sg[pi_t] sends w_t * s_i to token t, the other factor s_i * mean(w)."""
    calls = []
    for dtype in DTYPES:
        for shape in ((3, 6), (5, 9)):
            kw = random_batch(g, shape, dtype, EQUAL)
            cotangent = torch.randn(shape, generator=g, dtype=F64).to(dtype) * kw["mask"]  # type: ignore[operator]
            calls.append(call(TOKEN, kw, "backward from a random cotangent", backward=cotangent))
    return calls


def _placed(g: torch.Generator, dtype: torch.dtype, ratios: list[float], signs: list[float], **eps: float) -> Kwargs:
    lengths = [_randint(g, 2, 7) for _ in ratios]
    return with_advantages(g, {**batch(g, ratios, lengths, 8, dtype), **eps}, signs)


def default_widths(g: torch.Generator) -> list[Call]:
    """Widths omitted: ratios between 1 +- 3e-4 / 1 +- 4e-4 and 1 +- 0.2, and between 1 + 3e-4 and 1 + 4e-4."""
    calls = []
    for dtype in DTYPES:
        ratios = [1 + _u(g, 3.2e-4, 3.8e-4), 1 - _u(g, 6e-4, 0.1), 1 + _u(g, 6e-4, 0.1), 1 - _u(g, 6e-4, 0.1)]
        kw = _placed(g, dtype, ratios, [1.0, -1.0, 1.0, -1.0])
        del kw["eps_low"], kw["eps_high"]
        calls.append(call(LOSS, kw, "eps_low and eps_high omitted"))
        calls.append(call(LOSS, {**kw, "eps_low": 3e-4}, "eps_high omitted"))
    return calls


def asymmetric_eps(g: torch.Generator) -> list[Call]:
    """Ratios between the two widths' bounds on each side."""
    calls = []
    for dtype in DTYPES:
        for low, high in ((1e-4, 5e-4), (5e-4, 1e-4), (0.1, 0.3), (0.3, 0.1)):
            a, b = sorted((low, high))
            ratios = [1 + _u(g, 1.1 * a, 0.9 * b), 1 - _u(g, 1.1 * a, 0.9 * b), 1 + 1.5 * b, 1 - 1.5 * b]
            kw = _placed(g, dtype, ratios, [1.0, -1.0, 1.0, -1.0], eps_low=low, eps_high=high)
            calls.append(call(LOSS, kw, "ratios between the bounds the two widths set"))
    return calls


def empty_responses(g: torch.Generator) -> list[Call]:
    """Responses with no valid token: s = 1, no loss, counted in B, no tokens in clipfrac."""
    calls = []
    for dtype in DTYPES:
        for lengths in ((0, 5, 2, 0), (3, 0, 6)):
            kinds = ["above", "inside", "below", "above"][: len(lengths)]
            kw = batch(g, [region(g, k, EQUAL) for k in kinds], lengths, 7, dtype)
            kw = with_advantages(g, kw, [1.0, -1.0, -1.0, 1.0][: len(lengths)])
            group = f"empty responses {dtype} {lengths}"  # the convention is kept or broken as a whole
            calls += [call(f, kw, f"responses of {lengths} tokens", group=group) for f in (RATIO, LOSS, TOKEN)]
    return calls


def clipfrac_tokens(g: torch.Generator) -> list[Call]:
    """clipfrac counts the valid tokens of clipped responses, not the clipped responses; a clipped batch of one
    response and one token (B and the token count at 1) is judged with a ragged one."""
    calls = []
    for dtype in DTYPES:
        for lengths, group in (((1, 12, 3, 7), None), ((9, 2, 14), f"one token {dtype}"), ((1,), f"one token {dtype}")):
            kw = batch(g, [region(g, k, EQUAL) for k in ["above", "inside", "below", "above"][: len(lengths)]],
                       lengths, 15, dtype)
            kw = with_advantages(g, kw, [1.0, 1.0, -1.0, -1.0][: len(lengths)])
            calls.append(call(LOSS, kw, "ragged" if len(lengths) > 1 else "one clipped token", grad=(), group=group))
    return calls


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for pad in ((math.nan, math.nan), (math.inf, -math.inf), (-math.inf, math.nan)):
            kinds = ["above", "below", "inside"]
            kw = batch(g, [region(g, k, EQUAL) for k in kinds], [3, 5, 2], 6, dtype, pad=pad)
            kw = with_advantages(g, kw, [1.0, -1.0, 1.0])
            calls += [call(f, kw, f"padding logp={pad[0]}, old_logp={pad[1]}") for f in (RATIO, LOSS, TOKEN)]
    return calls


def log_space(g: torch.Generator) -> list[Call]:
    """Log-probabilities far below where exp underflows, and long responses whose summed log-ratios overflow exp."""
    calls = []
    for dtype, shift in ((F32, -150.0), (F64, -1000.0)):
        kinds = ["above", "below", "inside"]
        tiny = batch(g, [region(g, k, EQUAL) for k in kinds], [3, 5, 4], 6, dtype, shift=shift)
        # s = e^(+-11) on the unclipped side of its advantage: the product of ~100 ratios is e^(+-1100)
        far = [math.exp(_u(g, 10.5, 12.0)), math.exp(-_u(g, 10.5, 12.0)), region(g, "inside", EQUAL)]
        long = batch(g, far, [120, 96, 128], 128, dtype, sigma=1.5)
        for kw, note, signs in ((tiny, f"valid logp near {shift:g}", [1.0, -1.0, 1.0]),
                                (long, "mean log-ratios of +-11 over up to 128 tokens", [-1.0, 1.0, 1.0])):
            kw = with_advantages(g, kw, signs)
            calls += [call(f, kw, note, group=f"log space {dtype}") for f in (RATIO, LOSS)]
    return calls


def answering_shape(g: torch.Generator) -> tuple[int, int]:
    """[B, L] for calls judged on how they answer: B >= 7, L > B, B * L <= 400, drawn once per check and seed, so
    that no public observation has a graded call's shape."""
    rows = _randint(g, 7, 19)
    return rows, _randint(g, rows + 1, 400 // rows)


def stop_gradient(g: torch.Generator) -> list[Call]:
    calls, shape = [], answering_shape(g)
    for dtype in DTYPES:
        kw = random_batch(g, shape, dtype, EQUAL)
        for function in (RATIO, LOSS, TOKEN):
            grad = ("logp", "old_logp", "advantages") if function == LOSS else ("logp", "old_logp")
            calls.append(call(function, kw, "every tensor input requires grad", grad=grad, group=f"sg {dtype}"))
    return calls


def mask_dtypes(g: torch.Generator) -> list[Call]:
    """Masks of other dtypes, and transposed or strided views."""
    calls = []
    for dtype, kind in ((F32, F64), (F32, torch.uint8), (F64, F32), (F64, torch.int64)):
        kw = random_batch(g, (5, 8), dtype, EQUAL)
        kw = {**kw, "mask": kw["mask"].to(kind)}  # type: ignore[attr-defined]
        calls += [call(f, kw, f"{str(kind)[6:]} mask", group="mask dtypes") for f in (RATIO, LOSS)]
        strided = {k: v.t().contiguous().t() if isinstance(v, Tensor) and v.dim() == 2 else v for k, v in kw.items()}
        calls.append(call(TOKEN, strided, "column-major views", group="mask dtypes"))
    return calls


def value_errors(g: torch.Generator) -> list[Call]:
    """Each must-raise call grouped with a valid call at an edge of the contract."""
    kw = random_batch(g, (3, 4), F32, EQUAL)
    logp, old, mask = kw["logp"], kw["old_logp"], kw["mask"]
    assert isinstance(logp, Tensor) and isinstance(old, Tensor) and isinstance(mask, Tensor)
    raising: list[tuple[str, str, Kwargs]] = [
        (RATIO, "logp 1-D", {"logp": logp[0], "old_logp": old[0], "mask": mask[0]}),
        (TOKEN, "logp int64", {"logp": logp.round().to(torch.int64)}),
        (RATIO, "old_logp [1, 4]", {"old_logp": old[:1]}),
        (TOKEN, "mask [3, 1]", {"mask": mask[:, :1]}),
        (LOSS, "mask [3, 1]", {"mask": mask[:, :1]}),
        (LOSS, "advantages [3, 1]", {"advantages": torch.zeros(3, 1)}),
        (LOSS, "eps_low = 1", {"eps_low": 1.0}),
        (LOSS, "eps_low = NaN", {"eps_low": math.nan}),
        (LOSS, "eps_high = 0", {"eps_high": 0.0}),
        (LOSS, "eps_high = inf", {"eps_high": math.inf}),
        (LOSS, "eps_high = -1e-4, every token masked", {"eps_high": -1e-4, "mask": torch.zeros(3, 4)}),
    ]
    valid: list[Kwargs] = [{"eps_low": 0.0}, {"eps_low": 0.999}, {"eps_high": 5.0}, {"eps_high": 1e-7}]
    calls, shape = [], answering_shape(g)
    for index in torch.randperm(len(raising), generator=g).tolist():
        function, label, change = raising[index]
        group = f"errors {index}"
        bad = Call(function, call(function, {**kw, **change}, "").kwargs, f"{function}: {label} must raise ValueError",
                   group=group)
        fresh = {**random_batch(g, shape, F32, EQUAL), **valid[index % len(valid)]}
        good = call(function, fresh, "valid edge value", group=group).as_partner()
        calls += [bad, good] if bool(torch.rand((), generator=g) < 0.5) else [good, bad]
    return calls


def float64_precision(g: torch.Generator) -> list[Call]:
    kw = random_batch(g, (4, 8), F64, EQUAL)
    return [call(f, kw, "float64 arithmetic", group="float64") for f in (RATIO, LOSS, TOKEN)]
