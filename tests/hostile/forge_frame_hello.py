"""Sends a forged hello before the worker's own, naming its functions with malformed descriptions; the judge
must call it an import error, never its own."""
# expect_status: import_error
# expect_score: 0

import json
import os
import struct
import sys

import torch


def _response_fd():
    return json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it


def _send(frame):
    frame = memoryview(frame)
    while frame:
        frame = frame[os.write(_response_fd(), frame) :]


def _tagged(value):
    """A message as this protocol's JSON header writes it: objects are tags, a dict is `{"D": [[key, value]...]}`."""
    if isinstance(value, dict):
        return {"D": [[k, _tagged(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_tagged(v) for v in value]
    return value


def _frame(message, blobs=b""):
    head = json.dumps(_tagged(message)).encode()
    payload = b"PLF1" + struct.pack(">I", len(head)) + head + blobs
    return struct.pack(">Q", len(payload)) + payload


_send(_frame({"op": "ready", "functions": {"masked_is_weights": 5, "offpolicy_loss": ["callable"]}}))


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
