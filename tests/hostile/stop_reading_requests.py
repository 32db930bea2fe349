"""At import, moves the worker's request channel aside: keeps the judge's pipe open but unread (shrunk to one
page, so a request cannot fit) and leaves the worker's loop waiting on a pipe nobody writes. The judge's
sends must time out, never block."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import fcntl
import json
import os
import sys

import torch

F_SETPIPE_SZ = 1031
request_fd = json.loads(sys.argv[1])["request_fd"]
kept = os.dup(request_fd)
try:
    fcntl.fcntl(kept, F_SETPIPE_SZ, 4096)
except OSError:
    pass
silent_read, _silent_write = os.pipe()
os.dup2(silent_read, request_fd)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
