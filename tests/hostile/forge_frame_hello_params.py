"""Sends, before the worker's own hello, one whose functions have a list, an int and None as parameter names and
an unknown parameter kind: the judge must call it an import error, never its own."""
# expect_status: import_error
# expect_score: 0

import json
import os
import struct
import sys

import torch


def _send(frame):
    frame = memoryview(frame)
    fd = json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it
    while frame:
        frame = frame[os.write(fd, frame) :]


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


def _param(name, kind="POSITIONAL_OR_KEYWORD"):
    return {"name": name, "kind": kind, "has_default": False}


_send(
    _frame(
        {
            "op": "ready",
            "functions": {
                "masked_is_weights": {"callable": True, "params": [_param(["logp"]), _param(7), _param(None)]},
                "offpolicy_loss": {"callable": True, "params": [_param("logp", kind="SPREAD")]},
            },
        }
    )
)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
