"""Leaves a double-forked setsid daemon at import that sleeps 3 s, then for a minute drops marker files
into /tmp, its cwd and every parent folder of its cwd and of this file; answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import os
import sys

import torch

DAEMON = r"""
import os, sys, time
time.sleep(3)
places = {"/tmp", "/dev/shm", os.getcwd()}
for start in sys.argv[1:]:
    while start not in places:
        places.add(start)
        start = os.path.dirname(start)
end = time.monotonic() + 57
while time.monotonic() < end:
    for place in places:
        try:
            with open(os.path.join(place, "paperleet-hostile-marker-daemon"), "w") as handle:
                handle.write(str(os.getpid()))
        except OSError:
            pass
    time.sleep(0.5)
"""


def _daemonize(code, *args):
    """The classic double fork: a grandchild in a session of its own, detached from the worker."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execv(sys.executable, [sys.executable, "-S", "-c", code, "paperleet-hostile-daemon", *args])
        os._exit(0)
    os.waitpid(pid, 0)


_daemonize(DAEMON, os.getcwd(), os.path.dirname(os.path.abspath(__file__)))


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
