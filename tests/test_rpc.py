"""The wire format (grader/bertlab_grader/sandbox/inside/rpc.py) and the trusted-side proxies (grader/bertlab_grader/sandbox/remote.py), without a sandbox."""

from __future__ import annotations

import ast
import fcntl
import json
import math
import os
import re
import socket
import struct
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertlab_grader.sandbox.inside import rpc
from bertlab_grader.sandbox.remote import Remote, StudentError, student_exception

GRADER = Path(__file__).resolve().parents[1] / "grader" / "bertlab_grader"
Hit = namedtuple("Hit", ["corpus_id", "score", "text"])


def round_trip(value, fallback=None, resolve=None):
    """Encode, frame, send over a real socket pair, receive and decode."""
    a, b = socket.socketpair()
    with a, b:
        encoder = rpc.Encoder(fallback)
        rpc.Channel(a).send({"op": "x", "value": encoder.encode(value)}, encoder.tensors)
        header, tensors = rpc.Channel(b).recv(timeout=5)
    return rpc.Decoder(tensors, resolve).decode(header["value"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_tensor_dtypes_round_trip_exactly(dtype):
    x = (torch.randn(3, 5, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)
    y = round_trip(x)
    assert type(y) is torch.Tensor and y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y, x)


def test_tensor_views_grad_and_subclasses_cross_as_plain_data():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    param = torch.nn.Parameter(torch.ones(2, 2))
    out = round_trip([base[:, 1::2], base.T, param * 2, base[1:3], torch.zeros(0, 3), torch.tensor(7.0)])
    torch.testing.assert_close(out[0], base[:, 1::2])
    torch.testing.assert_close(out[1], base.T)
    assert not out[2].requires_grad and type(out[2]) is torch.Tensor
    torch.testing.assert_close(out[3], base[1:3])
    assert out[4].shape == (0, 3) and out[5].shape == ()


def test_ndarray_stays_ndarray_and_tensor_stays_tensor():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    big_endian = np.arange(4, dtype=">f8")
    out = round_trip({"a": arr, "t": torch.from_numpy(arr.copy()), "be": big_endian, "f": arr.T})
    assert isinstance(out["a"], np.ndarray) and out["a"].dtype == np.float32
    np.testing.assert_array_equal(out["a"], arr)
    assert isinstance(out["t"], torch.Tensor)
    np.testing.assert_array_equal(out["be"], big_endian)
    np.testing.assert_array_equal(out["f"], arr.T)


def test_nested_values_nan_and_named_tuples():
    value = {"floats": [math.nan, math.inf, -math.inf, -0.0, 1e-300], "t": (1, (2, [3, None])),
             "hits": [[Hit(3, 0.5, "x"), Hit(1, 0.25, "y")]], "np": [np.float32(0.5), np.int64(3), np.bool_(True)],
             "size": torch.Size([2, 3]), "dtype": torch.bfloat16, "s": "ünïcode \udc80"}
    out = round_trip(value)
    assert math.isnan(out["floats"][0]) and out["floats"][1:3] == [math.inf, -math.inf]
    assert math.copysign(1, out["floats"][3]) == -1
    assert out["t"] == (1, (2, [3, None]))
    hit = out["hits"][0][0]
    assert hit == (3, 0.5, "x") and hit.corpus_id == 3 and hit.text == "x"  # compares with a real Hit
    assert out["np"] == [0.5, 3, True] and type(out["np"][1]) is int and type(out["np"][2]) is bool
    assert out["size"] == (2, 3) and out["dtype"] is torch.bfloat16 and out["s"] == value["s"]


def test_number_subclasses_lose_their_behaviour():
    class Liar(float):
        def __eq__(self, other):
            return True

    out = round_trip([Liar(0.5), True])
    assert type(out[0]) is float and out[0] == 0.5 and out[0] != 1.0 and out[1] is True


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**62, 2**62) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20)


@settings(max_examples=60, deadline=None)
@given(json_values)
def test_plain_values_round_trip(value):
    assert round_trip(value) == value


hostile_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(["$t", "tensor", "ndarray", "nt", "dict", "tuple", "dtype", "float32", "k", "t0", "v"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["$t", "v", "k", "name", "fields", "id"]), children, max_size=4),
    max_leaves=25)


@settings(max_examples=120, deadline=None)
@given(hostile_json)
def test_decoding_arbitrary_json_fails_only_as_a_protocol_error(data):
    try:
        rpc.Decoder({"t0": torch.zeros(2, dtype=torch.bfloat16)}).decode(data)
    except rpc.ProtocolError:
        pass


def test_unencodable_values_go_to_the_fallback_or_are_refused():
    with pytest.raises(rpc.EncodeError):
        round_trip(object())
    with pytest.raises(rpc.EncodeError):
        round_trip({1: "non-str key"})
    seen = []
    out = round_trip([object(), {1: 2}], fallback=lambda o: seen.append(o) or {"$t": "handle", "id": len(seen)},
                     resolve=lambda tag: ("H", tag["id"]))
    assert out == [("H", 1), ("H", 2)]


def test_cyclic_and_deep_values_are_refused():
    cyclic = []
    cyclic.append(cyclic)
    with pytest.raises(rpc.EncodeError):
        rpc.Encoder().encode(cyclic)
    deep = []
    for _ in range(rpc.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(rpc.EncodeError):
        rpc.Encoder().encode(deep)
    with pytest.raises(rpc.ProtocolError):
        rpc.Decoder({}).decode(deep)


def frame(head: bytes, blob: bytes = b"", magic: bytes = rpc.MAGIC) -> bytes:
    return struct.pack("!4sIQ", magic, len(head), len(blob)) + head + blob


def receive(raw: bytes, max_message: int = rpc.MAX_MESSAGE, timeout: float = 2.0):
    a, b = socket.socketpair()
    with a, b:
        a.sendall(raw)
        return rpc.Channel(b, max_message=max_message).recv(timeout=timeout)


@pytest.mark.parametrize("raw, why", [
    (frame(b"{}", magic=b"PKL1"), "magic"),
    (frame(b"not json"), "undecodable"),
    (frame(b"[1, 2]"), "not a JSON object"),
    (frame(b"\xff\xfe{}"), "undecodable"),
    (frame(b'{"x": ' + b"9" * 5000 + b"}"), "undecodable"),  # int(str) digit limit
    (frame(b'{"x":' + b"[" * 100000 + b"]" * 100000 + b"}"), "undecodable"),  # json recursion
    (frame(b"{}", b"\x08\x00\x00\x00\x00\x00\x00\x00garbage!"), "tensor blob"),
])
def test_malformed_frames_are_protocol_errors(raw, why):
    with pytest.raises(rpc.ProtocolError, match=why):
        receive(raw)


def test_oversize_frames_are_refused_before_reading_them():
    # The prefix alone announces 1 GiB: refused at once, nothing allocated or awaited.
    with pytest.raises(rpc.ProtocolError, match="exceeds"):
        receive(struct.pack("!4sIQ", rpc.MAGIC, 10, 2**30))
    with pytest.raises(rpc.ProtocolError, match="exceeds"):
        receive(frame(b'{"pad": "' + b"x" * 5000 + b'"}'), max_message=1000)
    with pytest.raises(rpc.EncodeError):
        rpc.encode_message({"pad": "x" * 5000}, {}, max_message=1000)


def test_a_stalled_frame_times_out():
    with pytest.raises(TimeoutError):
        receive(struct.pack("!4sIQ", rpc.MAGIC, 100, 0) + b"{", timeout=0.3)


def test_unknown_tags_and_dangling_tensor_keys_are_protocol_errors():
    for bad in ({"$t": "pickle", "v": "..."}, {"$t": "tensor", "k": "t9"}, {"no": "tag"},
                {"$t": "nt", "name": "os.system", "fields": ["a"], "v": [1]}, {"$t": "handle", "id": 1}):
        with pytest.raises(rpc.ProtocolError):
            rpc.Decoder({}).decode(bad)


def _open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


class CountingSocket:
    """A socket that counts the bytes sent through it (the rest it passes on)."""

    def __init__(self, sock):
        self.sock, self.sent = sock, 0

    def sendall(self, data):
        self.sent += len(data)
        return self.sock.sendall(data)

    def sendmsg(self, buffers, ancillary):
        sent = self.sock.sendmsg(buffers, ancillary)
        self.sent += sent
        return sent

    def __getattr__(self, name):
        return getattr(self.sock, name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool, torch.complex64])
def test_large_inputs_reach_the_sandbox_as_memory_files_not_through_the_socket(dtype):
    """Issue 44: a tensor of SHARED_MIN_BYTES or more that the trusted side sends into the sandbox crosses
    as a sealed memory file: the same values on the other side, a tensor the receiver may change (its
    own copy-on-write pages, the sender's untouched), and only the frame's header through the socket."""
    g = torch.Generator().manual_seed(1)
    big = (torch.randn(300_000, 8, generator=g) * 10).to(dtype)
    original = big.clone()
    small = torch.arange(6)
    a, b = socket.socketpair()
    with a, b:
        counted = CountingSocket(a)
        fds_before = _open_fds()
        rpc.Channel(counted, share_large=True).send({"op": "x"}, {"t0": big, "t1": small})
        header, tensors = rpc.Channel(b, accept_shared=True).recv(timeout=5)
        assert header == {"op": "x"}
        assert tensors["t0"].dtype == dtype and tensors["t0"].shape == big.shape
        assert torch.equal(tensors["t0"], big) and torch.equal(tensors["t1"], small)
        assert counted.sent < 4096, f"{counted.sent} bytes went through the socket"
        received = tensors["t0"]
        received.zero_() if dtype is not torch.bool else received.logical_not_()
        assert not torch.equal(received, original) and torch.equal(big, original)  # the sender's is untouched
        del tensors, received
        assert _open_fds() == fds_before, "a memory file's descriptor was left open"


def test_the_trusted_side_never_takes_a_descriptor_from_the_sandbox():
    """A sandboxed process that sends memory files back is not believed: the trusted side's channel takes
    no descriptor from the socket (the kernel closes them), and a frame that lists shared tensors is a
    protocol error there."""
    a, b = socket.socketpair()
    with a, b:
        before = _open_fds()
        rpc.Channel(a, share_large=True).send({"op": "reply"}, {"t0": torch.zeros(400_000)})
        with pytest.raises(rpc.ProtocolError):
            rpc.Channel(b).recv(timeout=5)
        assert _open_fds() == before


@pytest.mark.parametrize("entry, why", [
    ({"t0": {"i": 1, "dtype": "float32", "shape": [262144]}}, "an index past the descriptors sent"),
    ({"t0": {"i": 0, "dtype": "float32", "shape": [262145]}}, "more bytes than the file holds"),
    ({"t0": {"i": 0, "dtype": "pickle", "shape": [262144]}}, "an unknown dtype"),
    ({"t0": {"i": 0, "dtype": "float32", "shape": [-1]}}, "a negative size"),
    ([1, 2], "not an object"),
])
def test_a_bad_shared_memory_entry_is_a_protocol_error(entry, why):
    fd = rpc._shared_file(torch.zeros(262144))
    before = _open_fds()
    with pytest.raises(rpc.ProtocolError):
        rpc.decode_message(json.dumps({"op": "x", "$shared": entry}).encode(), b"", [fd])
    assert _open_fds() == before - 1, f"{why}: the descriptor was not closed"


def test_a_shared_memory_file_is_sealed_against_writes():
    fd = rpc._shared_file(torch.ones(262144))
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
        with pytest.raises(PermissionError):
            os.write(fd, b"x")
    finally:
        os.close(fd)


def test_no_pickle_anywhere_in_the_wire_path():
    """The boundary never unpickles: no pickle-family import, no torch.load / np.load, anywhere in it."""
    banned_modules = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve", "copyreg",
                      "jsonpickle", "joblib", "multiprocessing"}
    files = sorted((GRADER / "sandbox").rglob("*.py"))  # launcher, remote proxy, and inside/: server, wire
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            elif isinstance(node, ast.Attribute) and node.attr in ("load", "loads", "Unpickler"):
                base = ast.unparse(node.value)
                assert base in ("json", "safetensors.torch"), f"{path.name}: {base}.{node.attr}"
                continue
            elif isinstance(node, ast.keyword) and node.arg in ("allow_pickle", "weights_only"):
                raise AssertionError(f"{path.name}: {node.arg}=")
            else:
                continue
            assert not names & banned_modules, f"{path.name} imports {names & banned_modules}"


# ------------------------------------------------------------------------------- trusted proxies

class FakeSession:
    def __init__(self, reply=None):
        self.reply, self.requests, self.released = reply, [], []

    def request(self, remote, mode, args=(), kwargs=None):
        self.requests.append((remote._bl_path, mode, args))
        return self.reply

    def release(self, hid, generation):
        self.released.append(hid)


def test_handles_never_pretend_to_be_values():
    handle = Remote(FakeSession(), ("handle", 1, 1), type_name="submission.cka.Liar")
    assert handle != 1.0 and not (handle == torch.tensor(1.0)) and handle == handle
    for convert, what in ((float, "a float"), (int, "an int"), (bool, "a truth value"), (np.asarray, "an array"),
                          (list, "an iterable")):
        with pytest.raises(TypeError, match=re.escape(what)) as info:
            convert(handle)
        assert "submission.cka.Liar" in str(info.value)
    with pytest.raises((TypeError, AssertionError)):
        torch.testing.assert_close(handle, torch.tensor(1.0))
    assert not hasattr(handle, "__array_interface__")  # dunders are not forwarded
    assert FakeSession().requests == []


def test_handle_calls_len_and_release():
    session = FakeSession(reply=3)
    handle = Remote(session, ("handle", 4, 1), type_name="Index")
    handle.search("q", top_k=2)
    assert len(handle) == 3
    assert session.requests == [(("search",), "call", ("q",)), (("__len__",), "call", ())]
    session.reply = "three"
    with pytest.raises(TypeError, match="non-negative int"):
        len(handle)


def test_student_exceptions_are_rebuilt_as_builtin_types():
    exc = student_exception({"type": "ShapeError", "builtin": "ValueError", "message": "bad shape",
                             "traceback": '  File "cka.py", line 3, in linear_cka\n'})
    assert isinstance(exc, ValueError) and isinstance(exc, StudentError)
    assert exc.type_name == "ShapeError" and "bad shape" in str(exc) and "cka.py" in str(exc)
    key = student_exception({"type": "KeyError", "builtin": "KeyError", "message": "'k'"})
    assert isinstance(key, KeyError) and str(key) == "'k'"
    other = student_exception({"type": "LinAlgError", "builtin": None, "message": "singular"})
    assert type(other) is StudentError and other.type_name == "LinAlgError"
    attr = student_exception({"type": "AttributeError", "builtin": "AttributeError", "message": "no"})
    with pytest.raises(AttributeError):
        raise attr
