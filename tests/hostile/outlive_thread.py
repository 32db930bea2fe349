"""Starts a non-daemon thread at import that runs for a minute, writing a marker; answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import threading
import time

import torch


def _linger():
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            with open("/tmp/paperleet-hostile-marker-thread", "w") as handle:
                handle.write("still here\n")
        except OSError:
            pass
        time.sleep(0.5)


threading.Thread(target=_linger, daemon=False, name="paperleet-hostile").start()


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
