"""grader.worker.protocol: frames round-trip plain data exactly and refuse anything else."""

from __future__ import annotations

import io
import math
import os
import random
import re
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch

from grader.confine.sandbox_init import check_config
from grader.judge.accept import MAX_FRAME_VALUES, MAX_ITEMS, MAX_PARAMS, accept_frame, accept_hello
from grader.judge.cases import Call
from grader.worker import messages, protocol
from grader.worker.framing import FrameOverdue
from grader.worker.protocol import HEAD, MAGIC, ProtocolError, decode, encode, read_frame, write_frame

HEADER_BYTES = 8


def roundtrip(message: dict[str, Any]) -> dict[str, Any]:
    frame = encode(message)
    assert int.from_bytes(frame[:HEADER_BYTES], "big") == len(frame) - HEADER_BYTES
    return decode(frame[HEADER_BYTES:])


def test_plain_data_round_trips() -> None:
    message: dict[str, Any] = {
        "op": "call",
        "n": 3,
        "x": 0.25,
        "flag": True,
        "nothing": None,
        "names": ["logp", "mask"],
        "nested": {"deep": [1, {"deeper": "yes"}]},
        "nan": math.nan,
        "tensors": [
            torch.arange(6, dtype=torch.float64).reshape(2, 3),
            torch.tensor([True, False]),
            torch.tensor(1.5, dtype=torch.float32),
            torch.full((2,), math.inf),
        ],
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


def test_objects_cannot_be_sent() -> None:
    with pytest.raises(TypeError, match="cannot cross"):
        encode({"op": "ready", "gift": Payload(Path("/nonexistent"))})


def _payload(head: str, blobs: bytes = b"") -> bytes:
    return MAGIC + HEAD.pack(len(head.encode())) + head.encode() + blobs


def test_a_pickle_is_refused_without_running_it(tmp_path: Path) -> None:
    """What a frame of the earlier format would carry: a pickle whose loading runs a command."""
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"op": "ready", "gift": Payload(marker)}, buffer, _use_new_zipfile_serialization=False)
    with pytest.raises(ProtocolError, match="not a frame of this protocol"):
        decode(buffer.getvalue())
    with pytest.raises(ProtocolError, match="unreadable frame"):
        decode(_payload('{"D":[["op","ready"]]', buffer.getvalue()))
    assert not marker.exists()


def test_frame_must_hold_a_dict() -> None:
    with pytest.raises(ProtocolError, match="not a dict"):
        decode(_payload("[1,2,3]"))


@pytest.mark.parametrize(
    ("head", "blobs", "why"),
    [
        (
            '{"D":[["x",{"X":["float32",[4],[1],0,16]}]]}',
            bytes(8),
            "more bytes than the frame holds",
        ),  # claims more than it holds
        ('{"D":[["x",{"X":["float32",[1],[1],0,4]}]]}', bytes(12), "bytes at the end of the frame belong to no tensor"),
        ('{"D":[["x",{"X":["float32",[8],[1],0,4]}]]}', bytes(4), "unreadable frame"),  # a view past its storage
        ('{"D":[["x",{"X":["float32",[-1],[1],0,4]}]]}', bytes(4), "not a list of counts"),
        ('{"D":[["x",{"X":["float32",[1],[1],0.5,4]}]]}', bytes(4), "not a list of counts"),
        ('{"D":[["x",{"X":["no_such_type",[1],[1],0,4]}]]}', bytes(4), "unreadable frame"),
        ('{"D":[["x",{"E":"sparse_coo torch.float32 tensor on cpu"}]]}', b"", "only dense tensors"),
        ('{"D":[["x",{"Q":1}]]}', b"", "unknown tag"),
        ('{"D":[["x",{"F":"nan","T":[]}]]}', b"", "not a tag"),
        ('{"D":[["x",NaN]]}', b"", "unreadable frame"),
        ('{"D":[["x",' + "[" * 100_000 + "]" * 100_000 + "]]}", b"", "unreadable frame"),  # deeper than any reader
    ],
)
def test_a_forged_frame_is_refused(head: str, blobs: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        decode(_payload(head, blobs))


def test_tensors_of_one_frame_share_no_memory() -> None:
    """Two views of one storage arrive as two storages (the worker must not see one call's writes in the next),
    and a frame's tensors never hold more bytes than the frame."""
    base = torch.arange(6.0)
    payload = encode({"a": base[:3], "b": base[3:], "c": [base] * 3})[HEADER_BYTES:]
    back = decode(payload)
    storages = {t.untyped_storage().data_ptr() for t in [back["a"], back["b"], *back["c"]]}
    assert len(storages) == 5 and torch.equal(back["b"], base[3:])
    assert sum(t.untyped_storage().nbytes() for t in [back["a"], back["b"], *back["c"]]) < len(payload)


def test_exotic_tensors_cross_as_a_refusal() -> None:
    for tensor in (torch.zeros(3, 3).to_sparse(), torch.zeros(3, device="meta")):
        with pytest.raises(ProtocolError, match="only dense tensors"):
            decode(encode({"x": tensor})[HEADER_BYTES:])


def test_big_ints_and_special_floats_round_trip_as_values() -> None:
    back = roundtrip({"big": 10**30, "huge": 10**2000, "neg": -(10**2000), "inf": -math.inf, "t": (1, "a")})
    assert back["big"] == 10**30 and back["huge"] == math.inf and back["neg"] == -math.inf
    assert back["inf"] == -math.inf and back["t"] == (1, "a")


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
    assert obs["inputs_after"] == {}  # an input the call left as it was is not handed back
    assert not x.requires_grad  # the caller's tensor is left alone


def test_observe_call_hands_back_only_the_inputs_a_call_changed() -> None:
    def edits(logp: torch.Tensor, mask: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        logp.detach()[0] = float("nan")  # through a view that shares the input's storage
        scale.neg_()  # 0.0 becomes -0.0: the same value, other bits
        return mask.sum()

    x, m, z = torch.tensor([1.0, float("nan")]), torch.tensor([True, False]), torch.zeros(2)
    obs = protocol.observe_call(edits, {"logp": x, "mask": m, "scale": z}, ["logp"], False)
    assert set(obs["inputs_after"]) == {"logp", "scale"}
    assert torch.isnan(obs["inputs_after"]["logp"]).all() and torch.signbit(obs["inputs_after"]["scale"]).all()
    assert not torch.isnan(x[0])  # the caller's tensors are left alone


def test_observe_call_backpropagates_a_cotangent_through_a_non_scalar_output() -> None:
    x = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    cotangent = torch.tensor([3.0, 0.0, -1.0], dtype=torch.float64)
    obs = protocol.observe_call(lambda x: (x * x, x.sign()), {"x": x}, ["x"], cotangent)
    assert torch.equal(obs["grads"]["x"], 2 * x * cotangent)  # the vector-Jacobian product, not the sum's gradient


def test_a_cotangent_of_another_shape_is_a_backward_error_not_a_broadcast() -> None:
    obs = protocol.observe_call(lambda x: x.exp(), {"x": torch.ones(3)}, ["x"], torch.ones(1, 3))
    assert obs["backward_error"]["type"] == "ValueError" and "shape [3]" in obs["backward_error"]["message"]
    assert "grads" not in obs


def test_observe_call_records_a_failing_backward() -> None:
    obs = protocol.observe_call(lambda logp: logp.detach().sum(), {"logp": torch.ones(2)}, ["logp"], True)
    assert obs["backward_error"]["type"] == "RuntimeError"


# ----------------------------------------------------------------------------- typed messages and configs


def _wire(message: Mapping[str, Any]) -> dict[str, Any]:
    """`message` as the other side reads it: through a frame, loaded with weights_only."""
    return decode(encode(message)[8:])


def test_every_message_builder_survives_a_frame_with_its_op_a_plain_string() -> None:
    call = Call("f", {"x": torch.ones(2)}, "label", ("x",), True, hidden=True, group="g")
    built = [
        messages.calls_request([call.request()]),
        messages.ready({"f": {"callable": True, "params": []}}),
        messages.import_failed({"type": "SyntaxError", "message": "bad"}, 3),
        messages.observed({"inputs_after": {}}),
        messages.missing("f"),
        messages.request_error("no"),
    ]
    ops = [
        messages.Op.CALLS,
        messages.Op.READY,
        messages.Op.IMPORT_ERROR,
        messages.Op.OBSERVED,
        messages.Op.MISSING,
        messages.Op.ERROR,
    ]
    for message, op in zip(built, ops, strict=True):
        assert type(message["op"]) is str and _wire(message)["op"] == op
    (sent,) = messages.read_calls(_wire(built[0]))
    assert sent["function"] == "f" and sent["requires_grad"] == ["x"] and sent["backward"] is True
    assert set(sent) == {"function", "kwargs", "requires_grad", "backward"}  # never the label, group or hidden


def test_a_cotangent_crosses_to_the_worker_as_the_calls_backward() -> None:
    cotangent = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    call = Call("f", {"x": torch.ones(1, 2)}, "label", ("x",), cotangent)
    (sent,) = messages.read_calls(_wire(messages.calls_request([call.request()])))
    assert type(sent["backward"]) is torch.Tensor and torch.equal(sent["backward"], cotangent)
    assert torch.equal(Call.from_data(_wire(call.to_data())).backward, cotangent)  # type: ignore[arg-type]


def test_a_call_round_trips_through_its_one_serialization() -> None:
    call = Call("f", {"x": torch.ones(2), "n": 3}, "label", ("x",), True, hidden=True, group="g")
    again = Call.from_data(_wire(call.to_data()))
    assert (again.function, again.label, again.requires_grad, again.backward, again.hidden, again.group) == (
        "f",
        "label",
        ("x",),
        True,
        True,
        "g",
    )
    assert torch.equal(again.kwargs["x"], torch.ones(2)) and again.kwargs["n"] == 3


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "call", "calls": []},
        {"op": "calls", "calls": {}},
        {"op": "calls", "calls": [{"function": 1, "kwargs": {}, "requires_grad": [], "backward": False}]},
        {"op": "calls", "calls": [{"function": "f", "kwargs": {}, "requires_grad": [], "backward": 1}]},
        {"op": "calls", "calls": [{"function": "f", "kwargs": {}, "requires_grad": [], "backward": [1.0]}]},
        {"op": "calls", "calls": [{"function": "f", "kwargs": {}, "requires_grad": [], "backward": None}]},
        {
            "op": "calls",
            "calls": [
                {"function": "f", "kwargs": {}, "requires_grad": [], "backward": torch.nn.Parameter(torch.ones(1))}
            ],
        },
        {"op": "calls", "calls": [{"function": "f", "kwargs": {}, "requires_grad": [2], "backward": False}]},
    ],
)
def test_a_request_of_the_wrong_form_is_refused(request_: dict) -> None:
    with pytest.raises(ValueError):
        messages.read_calls(request_)


def test_the_worker_config_is_checked_field_by_field() -> None:
    config = {
        "submission": "/runtime/submission.py",
        "functions": ["f"],
        "request_fd": 3,
        "response_fd": 4,
        "max_frame_bytes": 1 << 30,
    }
    assert messages.read_worker_config(config) == config
    for field, wrong in [("request_fd", True), ("functions", "f"), ("submission", None)]:
        with pytest.raises(ValueError, match=field):
            messages.read_worker_config({**config, field: wrong})


def test_the_sandbox_config_is_checked_before_any_step() -> None:
    config = {
        "argv": ["python"],
        "worker": {},
        "env": {"PATH": "/bin"},
        "rlimits": {"RLIMIT_CORE": 0},
        "uid": 1,
        "gid": 1,
        "drop_uid": False,
        "die_with_parent": True,
        "cwd": "/",
        "tmp_mb": 64,
        "cgroups": [],
    }
    assert check_config(config) == config
    boxed = {**config, "box": "/b", "binds": [["/usr", "/usr", True]], "masks": [], "files": {"/etc/hosts": ""}}
    assert check_config(boxed) == boxed
    for wrong in [
        {**config, "uid": "0"},
        {**config, "rlimits": {"RLIMIT_AS": 1.5}},
        {**config, "shell": True},
        {**config, "box": "/b"},
        {**boxed, "binds": [["/usr", "/usr"]]},
        dict(list(config.items())[1:]),
    ]:
        with pytest.raises(ValueError):
            check_config(wrong)


@pytest.mark.parametrize(
    "head",
    [
        '{"D":[["x",{"E":"SECRET-4711"}]]}',
        '{"D":[["x",{"SECRET-4711":1}]]}',
        '{"D":[["x",{"F":"SECRET-4711"}]]}',
        '{"D":[["x",{"X":["SECRET-4711",[1],[1],0,4]}]]}',
        '{"D":[["x",{"X":["float32",[4711],[1],0,4]}]]}',
        " " * 4711 + "}",  # JSON's own message gives the position
        '{"D":[["x",{"X":["float32",[1],[1],0,4]}]]}',  # and 4711 bytes after the tensor that belong to none
        '{"D":[["x",{"X":["uint8",[9999],[1],0,9999]}]]}',  # claims more than the 4711 bytes the frame holds
    ],
)
def test_a_refusal_quotes_nothing_the_sender_chose(head: str) -> None:
    """A worker that has seen a hidden case could pass it on through the judge's own words about its frame."""
    blobs = bytes(4 + 4711 if "[1],[1],0,4]" in head and "float32" in head else 4711) if '"X"' in head else b""
    with pytest.raises(ProtocolError) as refused:
        decode(_payload(head, blobs))
    assert not re.search("4711|4715", str(refused.value)), refused.value


# ----------------------------------------------------------------------------- bounded headers

FRAME_LIMIT = 64 << 20  # the judge's default result limit: each header below is as large as a frame may be
N = FRAME_LIMIT // 16


def _bounded(head: bytes) -> bytes:
    return MAGIC + HEAD.pack(len(head)) + head


# Each header, at the size of a whole frame, is refused by one bound. "4711" is the sender's choice throughout:
# no refusal may quote it.
HOSTILE_HEADERS: dict[str, tuple[Callable[[], bytes], str]] = {
    "millions of empty lists": (lambda: b"[" + b"[]," * (FRAME_LIMIT // 3) + b"[]]", "more than 65536 values"),
    "millions of numbers": (lambda: b"[" + b"4711," * (FRAME_LIMIT // 5) + b"0]", "more than 65536 values"),
    "deep nesting": (lambda: b"[" * FRAME_LIMIT, "nests deeper than 64 levels"),
    "deep nesting of tags": (lambda: b'{"T":[' * (FRAME_LIMIT // 6), "nests deeper than 64 levels"),
    "one huge string": (lambda: b'["' + b"4711" * (FRAME_LIMIT // 4) + b'"]', "string .* longer than"),
    "a huge string of escapes": (lambda: b'["' + b"\\u4711" * (FRAME_LIMIT // 6) + b'"]', "string .* longer than"),
    "many keys": (lambda: b'{"D":[' + b'["k4711",0],' * (FRAME_LIMIT // 12) + b"]}", "more than 65536 values"),
    "many object keys": (lambda: b"{" + b'"k4711":0,' * (FRAME_LIMIT // 10) + b"}", "more than 65536 values"),
    "only separators": (lambda: b"[" + b"," * FRAME_LIMIT + b"]", "more than 65536 values"),
    "a huge number": (lambda: b"[" + b"4711" * (FRAME_LIMIT // 4) + b"]", "number .* longer than"),
    "unended strings": (lambda: b'["' + b'\\"' * (FRAME_LIMIT // 2), "does not end"),
}


def _memory(field: str) -> int:
    """Bytes of this process's resident memory now (VmRSS), or at its peak since the last reset (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) << 10
    raise LookupError(field)


@pytest.mark.parametrize("shape", list(HOSTILE_HEADERS))
def test_a_hostile_header_is_refused_quickly_and_for_little_memory(shape: str) -> None:
    """Refused by a scan of the header that allocates nothing of its size and quotes none of it, whatever its
    shape: parsing a header of 22 million empty lists would cost 1.6 GB, and rebuilding it as much again."""
    make, why = HOSTILE_HEADERS[shape]
    payload = _bounded(make())
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from the current one
    before = _memory("VmRSS")
    started = time.process_time()
    with pytest.raises(ProtocolError, match=why) as refused:
        decode(payload, max_values=MAX_FRAME_VALUES)
    assert time.process_time() - started < 2.0  # CPU seconds; the slowest shape takes half of one
    assert _memory("VmHWM") - before < 16 << 20  # the frame is 64 MiB
    assert "4711" not in str(refused.value) and str(len(payload)) not in str(refused.value)


def _refusal(check: Callable[[], None]) -> str | None:
    try:
        check()
    except ProtocolError as exc:
        return str(exc)
    return None


def test_a_header_counted_whole_is_refused_exactly_where_the_token_scan_refuses_it() -> None:
    """Headers up to `WHOLE_COUNT_BYTES` are counted in whole passes, larger ones token by token: both refuse the
    same headers. Random texts of JSON's characters (nesting around the bound, strings that end or not, escapes,
    long numbers), each at a bound of values it may break, and the hostile shapes above cut to a small size."""
    generator = random.Random(4711)
    pieces = [b"[", b"]", b"{", b"}", b",", b":", b" ", b"\n", b'"', b'"a\\"b"', b'\\"', b"0", b"-1.5e3", b"true"]
    headers = [_bounded_small(make) for make, _ in HOSTILE_HEADERS.values()]
    for head in headers:  # each pass is linear: a megabyte of escaped quotes is not tried once per quote
        started = time.process_time()
        assert _refusal(partial(protocol._count_header, head, 65536)) is not None
        assert time.process_time() - started < 0.5
    headers += [b"[" * depth + b"]" * depth for depth in (63, 64, 65, 66)]
    headers += [b"[" + b"7" * length + b"]" for length in (protocol.MAX_NUMBER_BYTES, protocol.MAX_NUMBER_BYTES + 1)]
    for _ in range(3000):
        text = b"".join(generator.choices(pieces, k=generator.randrange(1, 200)))
        if generator.random() < 0.1:
            text = b"[" * generator.randrange(60, 70) + text
        headers.append(text)
    refused = 0
    for head in headers:
        for bound in (4, 20, 65536):
            whole = _refusal(partial(protocol._count_header, head, bound))
            scanned = _refusal(partial(protocol._scan_header, head, bound, None))
            assert (whole is None) == (scanned is None), (head[:200], bound, whole, scanned)
            refused += whole is not None
    assert 0 < refused < 3 * len(headers), "some headers are refused and some are not"


def _bounded_small(make: Callable[[], bytes]) -> bytes:
    """A hostile shape cut to a header the whole count reads (still past its bound: these bounds are small)."""
    return make()[: protocol.WHOLE_COUNT_BYTES]


def test_what_honest_workers_send_passes_the_bounds() -> None:
    """The largest hello the judge accepts (64 functions of 64 parameters) and an answer full of text."""
    params = [{"name": f"p{i}", "kind": "POSITIONAL_OR_KEYWORD", "has_default": False} for i in range(MAX_PARAMS)]
    hello = messages.ready({f"f{j}": {"callable": True, "params": params} for j in range(MAX_ITEMS)})
    assert len(accept_hello(accept_frame(encode(hello)[HEADER_BYTES:]))["functions"]) == MAX_ITEMS
    raised = protocol.describe_exception(ValueError("\u00e9\U0001f600 " * 4096))
    answer = messages.observed({"raised": raised, "inputs_after": {"x": torch.zeros(3, 4)}})
    assert accept_frame(encode(answer)[HEADER_BYTES:])["raised"] == raised


def test_a_frame_read_after_its_deadline_is_overdue() -> None:
    payload = encode(messages.observed({"inputs_after": {}}))[HEADER_BYTES:]
    with pytest.raises(FrameOverdue):
        decode(payload, max_values=MAX_FRAME_VALUES, deadline=time.monotonic() - 1)
    assert decode(payload, max_values=MAX_FRAME_VALUES, deadline=time.monotonic() + 60)["op"] == "observed"
