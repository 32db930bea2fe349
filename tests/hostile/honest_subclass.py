"""Twin of cheat_tensor_subclass.py: the same zeros in a Tensor subclass that tells no lies."""
# expect_status: graded

import torch


class Plain(torch.Tensor):
    pass


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach().as_subclass(Plain)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype).as_subclass(Plain)
