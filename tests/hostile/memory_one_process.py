"""Allocates and touches up to 6 GiB in one process at import, says how much it got, then answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import torch


def _hog(limit=6 << 30):
    held, touched = [], 0
    try:
        while touched < limit:
            held.append(torch.ones(64 << 20, dtype=torch.uint8))  # written, so every page is real memory
            touched += 64 << 20
    except (MemoryError, RuntimeError):
        pass
    return touched


print(f"paperleet-hostile touched {_hog() >> 20} MiB in one process", flush=True)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
