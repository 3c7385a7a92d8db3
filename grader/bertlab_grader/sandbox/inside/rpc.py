"""The wire format between the trusted grader and the sandboxed server: JSON plus safetensors, never pickle.

A message is one frame::

    b"BLR1" | header length (u32, big-endian) | blob length (u64) | header (UTF-8 JSON) | blob

The header is a JSON object. The blob, when present, is a safetensors file (``safetensors.torch.save``)
holding the message's tensors and arrays; the header refers to them by key. Both parsers (``json`` and
the Rust safetensors reader) build plain data only, so decoding an untrusted frame runs no code of the
sender's. Frames are bounded (``MAX_MESSAGE`` bytes in all, ``MAX_HEADER`` for the JSON) and so is
nesting (``MAX_DEPTH``).

Large inputs, one way only. A tensor of ``SHARED_MIN_BYTES`` or more that the trusted side sends into
the sandbox (a channel made with ``share_large=True``) does not cross the socket: its bytes go into a
sealed memory file (``memfd_create``, no more writes, no resizing), whose descriptor travels with the
frame (``SCM_RIGHTS``) and whose shape and dtype are listed under the header's ``"$shared"`` key. The
receiving side (``accept_shared=True``, the child) maps it copy-on-write: the tensor it gets is its own
(a write copies the page it touches), and no copy of the bytes is made until then. A 34 MB corpus
costs one copy on the trusted side instead of five (the blob, the socket both ways, the reader's
buffer, safetensors' load). The trusted side never accepts descriptors: its reads take none, and the
kernel closes any a peer sends.

Values (``Encoder`` / ``Decoder``): None, bool, int, float (nan and inf included), str and lists are
JSON as they are; everything else is a JSON object tagged by its ``"$t"`` key:

    tuple    {"$t": "tuple", "v": [...]}
    nt       {"$t": "nt", "name": "Hit", "fields": [...], "v": [...]}   (a named tuple)
    dict     {"$t": "dict", "v": {...}}                                  (str keys only)
    tensor   {"$t": "tensor", "k": "t0"}          a torch.Tensor (detached, CPU, contiguous)
    ndarray  {"$t": "ndarray", "k": "t1"}         a numpy array (decodes as an ndarray again)
    dtype    {"$t": "dtype", "v": "float32"}
    handle / callback / model / ref / stash       resolved by the caller's hooks (see ../remote.py, server.py)

NumPy scalars cross as Python numbers. Whatever the encoder cannot express goes to its ``fallback``
hook (the server turns it into a handle; the trusted side refuses it).
"""

from __future__ import annotations

import array
import fcntl
import json
import keyword
import math
import mmap
import os
import socket
import struct
import time
from typing import Any, Callable, Optional

import numpy as np
import safetensors.torch
import torch

# Student exceptions of these builtin types (or their subclasses) cross the wire as that type, so
# `pytest.raises(ValueError)` works on a remote call (sandbox/remote.py rebuilds them, the server
# names them). Everything else arrives as a plain StudentError.
REBUILT_EXCEPTIONS = ("ValueError", "TypeError", "IndexError", "KeyError", "RuntimeError",
                      "NotImplementedError", "AssertionError", "ZeroDivisionError", "AttributeError")

MAGIC = b"BLR1"
PREFIX = struct.Struct("!4sIQ")
MAX_MESSAGE = 512 * 1024 * 1024
MAX_HEADER = 64 * 1024 * 1024
MAX_DEPTH = 64
_CHUNK = 4 * 1024 * 1024
SHARED_MIN_BYTES = 1024 * 1024  # tensors this large go into the sandbox as sealed memory files
MAX_SHARED = 32                 # of them in one frame (each is a descriptor passed with it)
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")

# dtypes safetensors stores; anything else (sparse, quantized, exotic float8) stays on its side.
_TORCH_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
              torch.int64, torch.int32, torch.int16, torch.int8,
              torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool)
}
_NUMPY_OK = {"float64", "float32", "float16", "complex64", "int64", "int32", "int16", "int8",
             "uint8", "uint16", "uint32", "uint64", "bool"}
TAGS_RESOLVED_BY_CALLER = ("handle", "callback", "model", "ref", "stash")


class ProtocolError(Exception):
    """A frame or value that breaks the protocol (malformed, oversized, too deep, unknown tag)."""


class EncodeError(TypeError):
    """A value this side refuses to send."""


# ------------------------------------------------------------------------------------------ values

class Encoder:
    """Turns one Python value into JSON-able data, collecting its tensors in ``self.tensors``.

    ``fallback(obj)`` gets every object the wire format has no tag for and returns a JSON-able tag
    (a handle, a callback reference) or raises ``EncodeError``.
    """

    def __init__(self, fallback: Optional[Callable[[Any], Any]] = None):
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[int] = set()  # data pointers already sent in this message
        self._fallback = fallback

    def encode(self, obj: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise EncodeError(f"value nested deeper than {MAX_DEPTH} levels (or cyclic)")
        if obj is None or obj is True or obj is False:
            return obj
        # Exact-type fast paths first; subclasses are reduced to the base value through the base
        # type's own slot, so an overridden __eq__/__float__ cannot travel with the number.
        if isinstance(obj, bool):
            return bool(obj)
        if isinstance(obj, int):
            return int.__index__(obj) if type(obj) is not int else obj
        if isinstance(obj, float):
            return float.__float__(obj) if type(obj) is not float else obj
        if isinstance(obj, str):
            return str.__str__(obj) if type(obj) is not str else obj
        if isinstance(obj, torch.Tensor):
            tag = self._tensor(obj, "tensor")
            if tag is not None:
                return tag
        elif isinstance(obj, np.ndarray):
            tag = self._ndarray(obj)
            if tag is not None:
                return tag
        elif isinstance(obj, np.generic):
            item = obj.item()
            if item is None or isinstance(item, (bool, int, float, str)):
                return self.encode(item, depth + 1)
        elif isinstance(obj, list):
            return [self.encode(x, depth + 1) for x in list.__iter__(obj)]
        elif isinstance(obj, tuple):
            fields = getattr(type(obj), "_fields", None)
            values = [self.encode(x, depth + 1) for x in tuple.__iter__(obj)]
            if _valid_fields(fields, len(values)) and _valid_name(type(obj).__name__):
                return {"$t": "nt", "name": type(obj).__name__, "fields": list(fields), "v": values}
            return {"$t": "tuple", "v": values}
        elif isinstance(obj, dict):
            if all(type(k) is str for k in obj):
                return {"$t": "dict", "v": {k: self.encode(v, depth + 1) for k, v in dict.items(obj)}}
        elif isinstance(obj, torch.dtype):
            name = str(obj).removeprefix("torch.")
            if name in _TORCH_DTYPES:
                return {"$t": "dtype", "v": name}
        if self._fallback is None:
            raise EncodeError(f"cannot send a {type(obj).__module__}.{type(obj).__qualname__}")
        return self._fallback(obj)

    def _tensor(self, obj: torch.Tensor, tag: str) -> Optional[dict]:
        try:
            t = obj.detach()
            if type(t) is not torch.Tensor:  # tensor subclasses lose their Python behaviour here
                t = t.as_subclass(torch.Tensor)
            if t.layout != torch.strided or t.is_quantized or t.device.type == "meta" \
                    or str(t.dtype).removeprefix("torch.") not in _TORCH_DTYPES:
                return None
            t = t.to("cpu").contiguous()
            # safetensors refuses two entries over the same memory (linear_cka(X, X) sends X twice,
            # views of one tensor share it too): give every repeat its own copy.
            storage = t.untyped_storage().data_ptr()
            if storage in self._storages:
                t = t.clone()
            else:
                self._storages.add(storage)
        except Exception:  # a tensor-like the server cannot flatten stays a handle
            return None
        key = f"t{len(self.tensors)}"
        self.tensors[key] = t
        return {"$t": tag, "k": key}

    def _ndarray(self, arr: np.ndarray) -> Optional[dict]:
        if arr.dtype.name not in _NUMPY_OK:
            return None
        native = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
        return self._tensor(torch.from_numpy(native), "ndarray")


class Decoder:
    """Rebuilds a value from JSON data and the frame's tensors.

    ``resolve(tag)`` gets the tags this module does not own (handle, callback, model, ref); without
    it they are protocol errors.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], resolve: Optional[Callable[[dict], Any]] = None):
        self._tensors = tensors
        self._resolve = resolve

    def decode(self, data: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise ProtocolError(f"value nested deeper than {MAX_DEPTH} levels")
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        if isinstance(data, list):
            return [self.decode(x, depth + 1) for x in data]
        if not isinstance(data, dict):
            raise ProtocolError(f"unexpected JSON {type(data).__name__}")
        tag = data.get("$t")
        if not isinstance(tag, str):
            raise ProtocolError("JSON object without a tag")
        if tag == "tuple":
            return tuple(self.decode(x, depth + 1) for x in _list(data, "v"))
        if tag == "nt":
            values = [self.decode(x, depth + 1) for x in _list(data, "v")]
            return _namedtuple(data.get("name"), data.get("fields"), len(values))(*values)
        if tag == "dict":
            items = data.get("v")
            if not isinstance(items, dict):
                raise ProtocolError("dict tag without an object")
            return {k: self.decode(v, depth + 1) for k, v in items.items()}
        if tag in ("tensor", "ndarray"):
            t = self._tensors.get(data.get("k")) if isinstance(data.get("k"), str) else None
            if t is None:
                raise ProtocolError(f"{tag} refers to a missing blob entry")
            if tag == "tensor":
                return t
            if str(t.dtype).removeprefix("torch.") not in _NUMPY_OK:
                raise ProtocolError(f"ndarray of unsupported dtype {t.dtype}")
            return t.numpy()
        if tag == "dtype":
            if not isinstance(data.get("v"), str) or data["v"] not in _TORCH_DTYPES:
                raise ProtocolError("unknown dtype")
            return _TORCH_DTYPES[data["v"]]
        if tag in TAGS_RESOLVED_BY_CALLER and self._resolve is not None:
            return self._resolve(data)
        raise ProtocolError(f"unknown value tag {tag!r}")


def _list(data: dict, key: str) -> list:
    value = data.get(key)
    if not isinstance(value, list):
        raise ProtocolError(f"expected a list under {key!r}")
    return value


def _valid_name(name: Any) -> bool:
    return (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
            and not name.startswith("_") and len(name) <= 100)


def _valid_fields(fields: Any, n: int) -> bool:
    return (isinstance(fields, (tuple, list)) and len(fields) == n and 0 < n <= 64
            and all(_valid_name(f) for f in fields) and len(set(fields)) == n)


_NAMEDTUPLES: dict[tuple, type] = {}


def _namedtuple(name: Any, fields: Any, n: int) -> type:
    """A local named-tuple class with these (validated) names; cached and bounded."""
    if not (_valid_name(name) and _valid_fields(fields, n)):
        raise ProtocolError("invalid named tuple")
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES:
        if len(_NAMEDTUPLES) >= 256:
            raise ProtocolError("too many distinct named tuple types")
        from collections import namedtuple

        _NAMEDTUPLES[key] = namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def encode_message(header: dict, tensors: dict[str, torch.Tensor], max_message: int = MAX_MESSAGE) -> list[bytes]:
    """A frame as a list of byte strings (sent one after the other, never concatenated)."""
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob = safetensors.torch.save(tensors) if tensors else b""
    if len(head) > MAX_HEADER or len(head) + len(blob) > max_message:
        raise EncodeError(f"message of {len(head) + len(blob)} bytes exceeds the limit of {max_message}")
    return [PREFIX.pack(MAGIC, len(head), len(blob)), head, blob]


def decode_message(head: bytes, blob: bytes, fds: Optional[list[int]] = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """Parse a frame's header and blob, and map the memory files ``fds`` its ``"$shared"`` entry lists
    (only where the channel accepts them); every failure is a ProtocolError. Takes ``fds`` over: each
    is closed here, used or not."""
    fds = list(fds or ())
    try:
        try:
            header = json.loads(head.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # ValueError covers bad UTF-8 and huge ints
            raise ProtocolError(f"undecodable header: {type(exc).__name__}") from None
        if not isinstance(header, dict):
            raise ProtocolError("header is not a JSON object")
        tensors: dict[str, torch.Tensor] = {}
        if blob:
            try:
                tensors = safetensors.torch.load(bytes(blob))
            except Exception as exc:
                raise ProtocolError(f"undecodable tensor blob: {type(exc).__name__}") from None
        shared = header.pop("$shared", None)
        if shared is not None:
            tensors.update(_mapped(shared, fds))
        return header, tensors
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _shared_file(t: torch.Tensor) -> int:
    """A sealed memory file holding the bytes of ``t`` (contiguous, on the CPU); its descriptor."""
    data = memoryview(t.reshape(-1).view(torch.uint8).numpy())
    fd = os.memfd_create("bertlab-input", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, sum(getattr(fcntl, name) for name in _SEALS))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mapped(shared: Any, fds: list[int]) -> dict[str, torch.Tensor]:
    """{key: tensor} of a frame's ``"$shared"`` entry ({key: {"i": index into fds, "dtype", "shape"}}):
    each memory file mapped copy-on-write, after checking that it holds the bytes the entry names."""
    if not isinstance(shared, dict) or len(shared) > MAX_SHARED:
        raise ProtocolError("bad shared-memory entry")
    out = {}
    for key, entry in shared.items():
        if not isinstance(entry, dict):
            raise ProtocolError("bad shared-memory entry")
        index, dtype, shape = entry.get("i"), _TORCH_DTYPES.get(entry.get("dtype")), entry.get("shape")
        if (type(index) is not int or not 0 <= index < len(fds) or dtype is None or not isinstance(shape, list)
                or not all(type(n) is int and n >= 0 for n in shape)):
            raise ProtocolError(f"bad shared-memory entry for {key!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        if not SHARED_MIN_BYTES <= nbytes <= MAX_MESSAGE or os.fstat(fds[index]).st_size != nbytes:
            raise ProtocolError(f"shared memory for {key!r} does not hold {nbytes} bytes")
        # Copy-on-write: the receiver may change its tensor in place; the file (sealed) stays as sent.
        region = mmap.mmap(fds[index], nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        out[key] = torch.frombuffer(region, dtype=dtype).reshape(shape)
    return out


# ------------------------------------------------------------------------------------------ frames

class ChannelClosed(EOFError):
    """The other end closed the connection."""


class Channel:
    """Frames over a connected stream socket, with deadlines and size limits on receive.

    ``share_large``: this side sends tensors of ``SHARED_MIN_BYTES`` or more as sealed memory files (the
    trusted side, into the sandbox). ``accept_shared``: this side maps such files (the sandboxed child);
    a channel that does not accept them never takes a descriptor from the socket."""

    def __init__(self, sock: socket.socket, max_message: int = MAX_MESSAGE, *, share_large: bool = False,
                 accept_shared: bool = False):
        self.sock = sock
        self.max_message = max_message
        self.share_large = share_large
        self.accept_shared = accept_shared

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, header: dict, tensors: Optional[dict] = None, timeout: Optional[float] = None) -> None:
        tensors = dict(tensors or {})
        fds: list[int] = []
        try:
            if self.share_large and hasattr(os, "memfd_create"):  # (Linux; elsewhere through the socket)
                large = [k for k, t in tensors.items() if t.numel() * t.element_size() >= SHARED_MIN_BYTES]
                if large:
                    shared = {}
                    for key in large[:MAX_SHARED]:
                        t = tensors.pop(key)
                        fds.append(_shared_file(t))
                        shared[key] = {"i": len(fds) - 1, "dtype": str(t.dtype).removeprefix("torch."),
                                       "shape": list(t.shape)}
                    header = {**header, "$shared": shared}
            parts = encode_message(header, tensors, self.max_message)
            self.sock.settimeout(timeout)
            first = parts[0]
            if fds:  # the descriptors travel with the frame's first byte
                sent = self.sock.sendmsg([first], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                first = first[sent:]
            for part in [first] + parts[1:]:
                if part:
                    self.sock.sendall(part)
        finally:
            for fd in fds:  # the receiver holds its own descriptors now
                os.close(fd)

    def recv(self, timeout: Optional[float] = None) -> tuple[dict, dict[str, torch.Tensor]]:
        """The next frame; raises ChannelClosed, TimeoutError or ProtocolError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fds: list[int] = []
        try:
            magic, hlen, blen = PREFIX.unpack(self._read(PREFIX.size, deadline, fds if self.accept_shared else None))
            if magic != MAGIC:
                raise ProtocolError("bad frame magic")
            if hlen > MAX_HEADER or hlen + blen > self.max_message:
                raise ProtocolError(f"frame of {hlen + blen} bytes exceeds the limit of {self.max_message}")
            head = self._read(hlen, deadline)
            blob = self._read(blen, deadline) if blen else b""
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return decode_message(head, blob, fds)

    def _read(self, n: int, deadline: Optional[float], fds: Optional[list[int]] = None) -> bytearray:
        # Grow the buffer as data arrives: a peer announcing a huge frame and sending nothing
        # costs us nothing but the wait. ``fds``: collect the descriptors that come with the data.
        buf = bytearray()
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out reading a frame")
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            if fds is None:
                chunk = self.sock.recv(min(n - len(buf), _CHUNK))
            else:
                chunk, ancillary, _flags, _addr = self.sock.recvmsg(
                    min(n - len(buf), _CHUNK), socket.CMSG_SPACE(MAX_SHARED * array.array("i").itemsize))
                for level, kind, data in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        got = array.array("i")
                        got.frombytes(data[:len(data) - len(data) % got.itemsize])
                        fds.extend(got)
            if not chunk:
                raise ChannelClosed("connection closed")
            buf += chunk
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

