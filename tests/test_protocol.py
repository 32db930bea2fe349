"""grader.worker.protocol: frames round-trip plain data exactly and refuse anything else."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pytest
import torch

from grader.worker import protocol
from grader.worker.protocol import ProtocolError, decode, encode, read_frame, write_frame

HEADER_BYTES = 8


def roundtrip(message: dict) -> dict:
    frame = encode(message)
    assert int.from_bytes(frame[:HEADER_BYTES], "big") == len(frame) - HEADER_BYTES
    return decode(frame[HEADER_BYTES:])


def test_plain_data_round_trips() -> None:
    message = {
        "op": "call", "n": 3, "x": 0.25, "flag": True, "nothing": None, "names": ["logp", "mask"],
        "nested": {"deep": [1, {"deeper": "yes"}]}, "nan": math.nan,
        "tensors": [torch.arange(6, dtype=torch.float64).reshape(2, 3), torch.tensor([True, False]),
                    torch.tensor(1.5, dtype=torch.float32), torch.full((2,), math.inf)],
    }
    back = roundtrip(message)
    assert back["nested"] == message["nested"] and back["names"] == message["names"]
    assert math.isnan(back["nan"]) and back["flag"] is True and back["nothing"] is None
    for got, sent in zip(back["tensors"], message["tensors"], strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(got, sent)


def test_non_contiguous_tensors_keep_their_strides() -> None:
    column_major = torch.arange(12.0).reshape(3, 4).t()  # [4, 3], strides (1, 4)
    every_second = torch.arange(10.0)[::2]
    back = roundtrip({"a": column_major, "b": every_second})
    assert back["a"].stride() == column_major.stride() and not back["a"].is_contiguous()
    assert back["b"].stride() == every_second.stride()
    assert torch.equal(back["a"], column_major) and torch.equal(back["b"], every_second)


def test_nan_payloads_survive_bit_for_bit() -> None:
    x = torch.tensor([math.nan, -0.0, 5e-324], dtype=torch.float64)
    back = roundtrip({"x": x})["x"]
    assert back.view(torch.int64).tolist() == x.view(torch.int64).tolist()


class Payload:
    """An object whose unpickling would run a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_non_plain_data_is_refused_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    frame = encode({"op": "ready", "gift": Payload(marker)})
    with pytest.raises(ProtocolError, match="unreadable frame"):
        decode(frame[HEADER_BYTES:])
    assert not marker.exists()


def test_frame_must_hold_a_dict() -> None:
    buffer = io.BytesIO()
    torch.save([1, 2, 3], buffer)
    with pytest.raises(ProtocolError, match="not a dict"):
        decode(buffer.getvalue())


def pipe_with(data: bytes) -> int:
    """A pipe holding `data` (small enough for the pipe's buffer), its write end closed."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def test_frames_travel_through_a_pipe() -> None:
    read, write = os.pipe()
    write_frame(write, {"op": "calls", "x": torch.ones(3)})
    os.close(write)
    try:
        message = read_frame(read, 1 << 20)
    finally:
        os.close(read)
    assert message["op"] == "calls" and torch.equal(message["x"], torch.ones(3))


def test_oversized_frame_is_refused_before_reading_it() -> None:
    frame = encode({"blob": torch.zeros(1000)})
    read = pipe_with(frame)
    try:
        with pytest.raises(ProtocolError, match="exceeds"):
            read_frame(read, 1000)
    finally:
        os.close(read)


def test_truncated_frame_is_refused() -> None:
    frame = encode({"op": "ready"})
    read = pipe_with(frame[:-5])
    try:
        with pytest.raises(ProtocolError, match="closed mid-frame"):
            read_frame(read, 1 << 20)
    finally:
        os.close(read)


def test_describe_refuses_tensor_subclasses_and_objects() -> None:
    class Sneaky(torch.Tensor):
        pass

    assert protocol.describe(torch.ones(2).as_subclass(Sneaky))["kind"] == "other"
    assert protocol.describe(object())["kind"] == "other"
    assert protocol.describe((torch.ones(1), 2.0))["kind"] == "sequence"
    assert protocol.describe(2.0) == {"kind": "python", "type": "float", "value": 2.0}


def test_describe_copies_a_tensor_out_of_its_graph() -> None:
    x = torch.ones(2, requires_grad=True)
    desc = protocol.describe(x * 3)
    assert desc["requires_grad"] is True and desc["has_grad_fn"] is True
    assert not desc["value"].requires_grad and desc["value"].grad_fn is None


def test_observe_call_records_gradients_and_inputs() -> None:
    x = torch.tensor([1.0, -2.0])
    obs = protocol.observe_call(lambda logp: (logp * logp).sum(), {"logp": x}, ["logp"], True)
    assert torch.equal(obs["grads"]["logp"], 2 * x)
    assert torch.equal(obs["inputs_after"]["logp"], x)
    assert not x.requires_grad  # the caller's tensor is left alone


def test_observe_call_records_a_failing_backward() -> None:
    obs = protocol.observe_call(lambda logp: logp.detach().sum(), {"logp": torch.ones(2)}, ["logp"], True)
    assert obs["backward_error"]["type"] == "RuntimeError"
