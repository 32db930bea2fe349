"""Answers zeros wrapped in a Tensor subclass whose comparisons all say "equal" (__eq__, __ne__ and
__torch_function__ for equal/allclose/isclose/eq): it must score exactly what honest_subclass.py scores."""
# expect_status: graded
# expect_score: honest_subclass

import torch

EQUAL = {torch.equal, torch.allclose, torch.Tensor.equal, torch.Tensor.allclose}
ELEMENTWISE = {torch.isclose, torch.eq, torch.Tensor.eq, torch.Tensor.__eq__}


class Liar(torch.Tensor):
    def __eq__(self, other):
        return torch.ones(self.shape, dtype=torch.bool)

    def __ne__(self, other):
        return torch.zeros(self.shape, dtype=torch.bool)

    __hash__ = torch.Tensor.__hash__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in EQUAL:
            return True
        if func in ELEMENTWISE:
            return torch.ones(torch.broadcast_shapes(*(torch.as_tensor(a).shape for a in args[:2])), dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach().as_subclass(Liar)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype).as_subclass(Liar)
