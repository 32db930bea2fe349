"""Forks 200 children at import, each renamed and in a session of its own, sleeping a minute; answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import ctypes
import os
import time

import torch

PR_SET_NAME = 15
_libc = ctypes.CDLL(None)
started = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break  # the process limit
    if pid == 0:
        _libc.prctl(PR_SET_NAME, b"paperleet-host", 0, 0, 0)  # /proc/PID/comm, for the test to look for
        os.setsid()
        time.sleep(60)
        os._exit(0)
    started += 1
print(f"paperleet-hostile started {started} children", flush=True)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
