"""Sends, before the worker's own hello, one whose functions have a list, an int and None as parameter names and
an unknown parameter kind: the judge must call it an import error, never its own."""
# expect_status: import_error
# expect_score: 0

import io
import json
import os
import struct
import sys

import torch


def _send(payload):
    frame = memoryview(struct.pack(">Q", len(payload)) + payload)
    fd = json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it
    while frame:
        frame = frame[os.write(fd, frame) :]


def _param(name, kind="POSITIONAL_OR_KEYWORD"):
    return {"name": name, "kind": kind, "has_default": False}


_buffer = io.BytesIO()
torch.save(
    {
        "op": "ready",
        "functions": {
            "masked_is_weights": {"callable": True, "params": [_param(["logp"]), _param(7), _param(None)]},
            "offpolicy_loss": {"callable": True, "params": [_param("logp", kind="SPREAD")]},
        },
    },
    _buffer,
)
_send(_buffer.getvalue())


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
