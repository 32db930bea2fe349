"""Sends, before the worker's own hello, a frame of a few hundred KiB whose storage record inflates to 256 MiB:
the judge must refuse it without inflating it (torch.save never compresses)."""
# expect_status: import_crashed
# expect_score: 0

import io
import json
import os
import struct
import sys
import zipfile

import torch


def _response_fd():
    return json.loads(sys.argv[1])["response_fd"]  # the worker's config, as its command line carries it


def _send(payload):
    frame = memoryview(struct.pack(">Q", len(payload)) + payload)
    while frame:
        frame = frame[os.write(_response_fd(), frame) :]


def _bomb(inflated=256 << 20):
    plain = io.BytesIO()
    torch.save({"op": "ready", "functions": {}, "x": torch.zeros(1, dtype=torch.uint8)}, plain)
    source, out = zipfile.ZipFile(io.BytesIO(plain.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info in source.infolist():
            if not info.filename.endswith("/data/0"):
                archive.writestr(info.filename, source.read(info.filename))
                continue
            record_info = zipfile.ZipInfo(info.filename)
            record_info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(record_info, "w", force_zip64=True) as record:
                zeros = bytes(1 << 20)
                for _ in range(inflated >> 20):
                    record.write(zeros)
    return out.getvalue()


_send(_bomb())


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype)
