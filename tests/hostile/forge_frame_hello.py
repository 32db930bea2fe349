"""Sends a forged hello before the worker's own, naming its functions with malformed descriptions; the judge
must call it an import error, never its own."""
# expect_status: import_error
# expect_score: 0

import io
import json
import os
import struct
import sys

import torch


def _response_fd():
    return json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it


def _send(payload):
    frame = memoryview(struct.pack(">Q", len(payload)) + payload)
    while frame:
        frame = frame[os.write(_response_fd(), frame) :]


_buffer = io.BytesIO()
torch.save({"op": "ready", "functions": {"masked_is_weights": 5, "offpolicy_loss": ["callable"]}}, _buffer)
_send(_buffer.getvalue())


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
