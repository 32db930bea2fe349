"""Replaces the worker's encoder: every answer is a frame just under the judge's 64 MiB result limit whose JSON
header is one list of some 22 million empty lists. Read whole, it would cost the judge gigabytes and a minute
per frame; it must be refused while its header is read, for little memory and time, and a worker that keeps
sending such frames must not be restarted for every remaining call."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import struct
import sys

import torch

FRAME_LIMIT = 64 << 20  # the judge's default result limit, in bytes of payload


def _bomb_frame():
    opening = b'{"D":[["op","observed"],["raised",'
    closing = b"]]}"
    room = FRAME_LIMIT - 8 - len(opening) - len(closing) - 2  # magic, header length and the outer brackets
    lists = b"[" + b"[]," * (room // 3 - 1) + b"[]]"
    head = opening + lists + closing
    payload = b"PLF1" + struct.pack(">I", len(head)) + head
    return struct.pack(">Q", len(payload)) + payload


def _install():
    for module in list(sys.modules.values()):
        if all(hasattr(module, name) for name in ("encode", "write_frame", "observe_call")):
            original = module.encode

            def encode(message, original=original):
                return _bomb_frame() if message.get("op") == "observed" else original(message)

            module.encode = encode


_install()


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
