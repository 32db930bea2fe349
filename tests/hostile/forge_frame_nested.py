"""Replaces the worker's encoder: every answer names, as the exception's base classes, a list nested 50 000 deep,
written as raw pickle opcodes (pickling it would recurse). Anything that recursed over it (str, repr, ==) would
die of RecursionError in the judge; it must be the learner's malformed answer."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import io
import struct
import sys
import zipfile

import torch

DEPTH = 50_000  # under the judge's per-frame value count, far over Python's recursion limit
MARKER = "PAPERLEET_NESTED_MARKER"


def _nested_frame():
    plain = io.BytesIO()
    torch.save(
        {"op": "observed", "raised": {"type": "ValueError", "bases": MARKER, "message": "nested"}, "inputs_after": {}},
        plain,
    )
    pickled_marker = b"X" + struct.pack("<I", len(MARKER)) + MARKER.encode()
    nested = b"]" * DEPTH + b"a" * (DEPTH - 1)  # EMPTY_LIST x N, then APPEND each into the one below
    source, out = zipfile.ZipFile(io.BytesIO(plain.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith("data.pkl"):
                assert pickled_marker in data
                data = data.replace(pickled_marker, nested)
            archive.writestr(info.filename, data)
    payload = out.getvalue()
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
