"""Sends, before the worker's own hello, a frame of a few hundred bytes whose header claims a 256 MiB tensor:
the judge must refuse it without allocating the tensor (the frame's bytes are all a tensor may hold)."""
# expect_status: import_crashed
# expect_score: 0

import json
import os
import struct
import sys

import torch

CLAIMED = 256 << 20


def _response_fd():
    return json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it


def _send(frame):
    frame = memoryview(frame)
    while frame:
        frame = frame[os.write(_response_fd(), frame) :]


def _bomb():
    tensor = {"X": ["uint8", [CLAIMED], [1], 0, CLAIMED]}
    head = json.dumps({"D": [["op", "ready"], ["functions", {"D": []}], ["x", tensor]]}).encode()
    payload = b"PLF1" + struct.pack(">I", len(head)) + head + bytes(256)
    return struct.pack(">Q", len(payload)) + payload


_send(_bomb())


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
