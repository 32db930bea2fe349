"""Replaces the worker's encoder: every answer names, as the exception's base classes, a list nested 50 000 deep,
written out as JSON text (encoding it would recurse). Anything that recursed over it (the reader, str, repr, ==)
would die of RecursionError in the judge; it must be refused as the worker's unreadable frame, never the judge's
error."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import struct
import sys

import torch

DEPTH = 50_000  # far over Python's recursion limit


def _nested_frame():
    raised = '{"D":[["type","ValueError"],["bases",' + "[" * DEPTH + "]" * DEPTH + '],["message","nested"]]}'
    head = ('{"D":[["op","observed"],["raised",' + raised + '],["inputs_after",{"D":[]}]]}').encode()
    payload = b"PLF1" + struct.pack(">I", len(head)) + head
    return struct.pack(">Q", len(payload)) + payload


def _install():
    for module in list(sys.modules.values()):
        if all(hasattr(module, name) for name in ("encode", "write_frame", "observe_call")):
            original = module.encode

            def encode(message, original=original):
                return _nested_frame() if message.get("op") == "observed" else original(message)

            module.encode = encode


_install()


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
