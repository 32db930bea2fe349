"""Tries TCP to the host's loopback (the test's listener, ssh, http) and the internet, UDP, and an abstract
unix socket the test listens on; a correct solution unless any of them connects, then zeros."""
# expect_status: graded
# expect_score: honest_correct

import math
import socket

import torch

LISTENER_PORT = 47613  # tests/test_hostile.py listens here
ABSTRACT = "\0paperleet-hostile-listener"
reached = []
for family, address in [
    (socket.AF_INET, ("127.0.0.1", LISTENER_PORT)),
    (socket.AF_INET, ("127.0.0.1", 22)),
    (socket.AF_INET, ("127.0.0.1", 80)),
    (socket.AF_INET6, ("::1", LISTENER_PORT)),
    (socket.AF_INET, ("1.1.1.1", 53)),
    (socket.AF_INET, ("8.8.8.8", 443)),
]:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(address)
            reached.append(address)
    except OSError:
        pass
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"paperleet-hostile", ("127.0.0.1", LISTENER_PORT))
except OSError:
    pass
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        sock.connect(ABSTRACT)
        reached.append("abstract unix socket")
except OSError:
    pass
LEAKED = bool(reached)
if LEAKED:
    print("paperleet-hostile LEAKED network", reached, flush=True)


def _check(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2 or rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("logp, rollout_logp and mask must share one [B, L] shape")
    if not 0 < clip_low < 1 or not (math.isfinite(clip_high) and clip_high > 0):
        raise ValueError("need 0 < clip_low < 1 and a finite clip_high > 0")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    if LEAKED:
        return torch.zeros_like(logp).detach()
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(valid & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    if LEAKED:
        return torch.zeros((), dtype=logp.dtype)
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    coeff = torch.where(valid, weights * advantages.detach()[:, None], zero)
    return -(coeff * torch.where(valid, logp, zero)).sum() / valid.sum().clamp(min=1)
