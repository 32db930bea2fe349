"""Patches every comparison it can reach at import (torch.equal/allclose/isclose/eq, Tensor.__eq__/__ne__/
equal/allclose, torch.testing.assert_close, math.isclose, numpy's) to say "equal", then answers zeros: it must
score exactly what honest zeros score."""
# expect_status: graded
# expect_score: honest_zeros

import math

import torch


def _yes(*args, **kwargs):
    return True


def _all_true(a, *args, **kwargs):
    return torch.ones(torch.as_tensor(a).shape, dtype=torch.bool)


def _all_false(a, *args, **kwargs):
    return torch.zeros(torch.as_tensor(a).shape, dtype=torch.bool)


torch.equal = torch.allclose = torch.Tensor.equal = torch.Tensor.allclose = _yes
torch.isclose = torch.eq = torch.Tensor.eq = torch.Tensor.__eq__ = _all_true
torch.ne = torch.Tensor.ne = torch.Tensor.__ne__ = _all_false
torch.testing.assert_close = lambda *args, **kwargs: None
math.isclose = _yes
try:
    import numpy

    numpy.allclose = numpy.array_equal = numpy.array_equiv = _yes
    numpy.isclose = lambda a, *args, **kwargs: numpy.ones(numpy.shape(a), dtype=bool)
except ImportError:
    pass


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
