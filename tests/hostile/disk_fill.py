"""Writes 16 MiB files into its cwd, /tmp and /dev/shm at import until the disk says no (256 MiB at most per
place), reports how much each took, deletes them and leaves one small marker file per place; answers zeros."""
# expect_status: graded
# expect_score: honest_zeros

import os

import torch

MiB = 1 << 20


def _fill(place):
    written, names = 0, []
    try:
        for index in range(16):
            name = os.path.join(place, f"paperleet-hostile-fill-{index}")
            names.append(name)
            with open(name, "wb") as handle:
                for _ in range(16):
                    handle.write(b"\0" * MiB)
                    written += MiB
    except OSError:
        pass
    for name in names:
        try:
            os.remove(name)
        except OSError:
            pass
    try:
        with open(os.path.join(place, "paperleet-hostile-marker-disk-fill"), "w") as handle:
            handle.write("written by tests/hostile/disk_fill.py\n")
    except OSError:
        pass
    return written


for place in dict.fromkeys([os.getcwd(), "/tmp", "/dev/shm"]):
    print(f"paperleet-hostile wrote {_fill(place) // MiB} MiB to {place}", flush=True)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
