"""Writes 300 MiB to stdout and 300 MiB to stderr at import, then answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import os

import torch

CHUNK = b"paperleet-hostile flood " * (1 << 16)  # 1.5 MiB
for fd in (1, 2):
    for _ in range(200):
        view = memoryview(CHUNK)
        while view:
            view = view[os.write(fd, view) :]


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
