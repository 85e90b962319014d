"""Codecs and codec states of libciuic over numpy arrays (the C API's ciuic_codec_* calls).

Arrays are 1-D, C-contiguous: float32 for tensors, uint8 for wires. Nothing here copies a tensor
except where a call returns a new array.
"""
import ctypes

import numpy as np

from ciuic import _lib
from ciuic._lib import call
from ciuic.errors import UsageError


def _floats(a, name, n=None):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 1 or not a.flags.c_contiguous:
        raise TypeError(f"{name}: expected a 1-D C-contiguous float32 numpy array")
    if n is not None and a.size != n:
        raise ValueError(f"{name}: {a.size} elements, expected {n}")
    return a.ctypes.data_as(ctypes.c_void_p)


def _whole(v, name, bits, unit=""):
    """A whole number in 0..2^bits-1 for a C parameter (ctypes would wrap -1 to 2^64-1, 2^32 + 1 to 1)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name}: expected a whole number{' of ' + unit if unit else ''}, not {type(v).__name__}")
    if not 0 <= int(v) < 2 ** bits:
        raise ValueError(f"{name}: {v}{' ' + unit if unit else ''}: expected 0..2^{bits}-1")
    return int(v)


def _count(n, name):
    """An element count for a size_t parameter (0..2^62-1)."""
    return _whole(n, name, 62, "elements")


def _int(v, name):
    """A C int parameter (0..2^31-1)."""
    return _whole(v, name, 31)


def _bytes(a, name, size=None, writable=False):
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.ndim != 1 or not a.flags.c_contiguous:
        raise TypeError(f"{name}: expected a 1-D C-contiguous uint8 numpy array")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: read-only")
    if size is not None and a.size != size:
        raise ValueError(f"{name}: {a.size} bytes, expected {size}")
    return a.ctypes.data_as(ctypes.c_void_p)


class Codec:
    """One compressor, from the runtime's codec spelling ("int8", "topk:0.01", "sign1", ...)."""

    def __init__(self, spec):
        if "\0" in str(spec):  # C would read the spelling up to it and take the rest for nothing
            raise ValueError(f"codec spec {str(spec)!r}: holds a NUL byte")
        handle = ctypes.c_void_p()
        call("ciuic_codec_create", str(spec).encode(), ctypes.byref(handle))
        self._h = handle
        buf = ctypes.create_string_buffer(128)
        call("ciuic_codec_name", self._h, buf, len(buf))
        self.name = buf.value.decode()
        flags = ctypes.c_uint32()
        call("ciuic_codec_flags", self._h, ctypes.byref(flags))
        self.flags = flags.value
        self.kind = self.name.split(":")[0]

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value and _lib._lib is not None:
            _lib._lib.ciuic_codec_destroy(h)
            self._h = None

    def __repr__(self):
        return f"Codec({self.name!r})"

    @property
    def lossless(self):
        return bool(self.flags & _lib.CODEC_LOSSLESS)

    @property
    def summable(self):
        return bool(self.flags & _lib.CODEC_SUMMABLE)

    @property
    def stateful(self):
        return bool(self.flags & _lib.CODEC_STATEFUL)

    @property
    def has_decode_add_encode(self):
        return bool(self.flags & _lib.CODEC_DECODE_ADD_ENCODE)

    def wire_bytes(self, n):
        out = ctypes.c_size_t()
        call("ciuic_codec_wire_bytes", self._h, _count(n, "n"), ctypes.byref(out))
        return out.value

    def chunk(self, n, parts, index):
        """(begin, end) of chunk `index` of `parts`, on the codec's block as the runtime cuts buckets."""
        b, e = ctypes.c_size_t(), ctypes.c_size_t()
        call("ciuic_codec_chunk", self._h, _count(n, "n"), _int(parts, "parts"), _int(index, "index"), ctypes.byref(b), ctypes.byref(e))
        return b.value, e.value

    def chunks(self, n, parts):
        return [self.chunk(n, parts, i) for i in range(parts)]

    def encode(self, x, state=None, out=None):
        """(wire, step): x encoded, with error feedback through `state` when given."""
        n = x.size
        wb = self.wire_bytes(n)
        if out is None:
            out = np.empty(wb, np.uint8)
        step = ctypes.c_uint64()
        call("ciuic_codec_encode", self._h, state._h if state is not None else None, _floats(x, "x"), n,
             _bytes(out, "out", wb, True), wb, ctypes.byref(step))
        return out, step.value

    def encode_chunks(self, x, parts, state=None, out=None):
        """(wire, step): chunk i of `parts` encoded on its own after chunks 0..i-1, at one step."""
        n = x.size
        parts = _int(parts, "parts")
        wb = sum(self.wire_bytes(e - b) for b, e in self.chunks(n, parts))
        if out is None:
            out = np.empty(wb, np.uint8)
        step = ctypes.c_uint64()
        call("ciuic_codec_encode_chunks", self._h, state._h if state is not None else None, _floats(x, "x"), n,
             parts, _bytes(out, "out", wb, True), wb, ctypes.byref(step))
        return out, step.value

    def decode(self, wire, n, step=0, out=None):
        n = _count(n, "n")
        wb = self.wire_bytes(n)
        # Checked before `out` is made: a count the wire cannot hold is the caller's mistake, not a
        # request for 2^60 floats of memory.
        _bytes(wire, "wire")
        if wire.size != wb:
            raise UsageError(1, f"decode: wire: {wire.size} bytes given, codec {self.name} encodes {n} elements "
                                f"in {wb}")
        if out is None:
            out = np.empty(n, np.float32)
        call("ciuic_codec_decode", self._h, _bytes(wire, "wire"), wire.size, n, step, _floats(out, "out", n))
        return out

    def decode_accumulate(self, wire, acc, step=0):
        call("ciuic_codec_decode_accumulate", self._h, _bytes(wire, "wire"), wire.size, acc.size, step,
             _floats(acc, "acc"))
        return acc

    def decode_add_encode(self, wire_in, local, step=0, out=None):
        """encode(decode(wire_in) + local), fused: one hop of the compressed ring."""
        n = local.size
        wb = self.wire_bytes(n)
        if out is None:
            out = np.empty(wb, np.uint8)
        _bytes(wire_in, "wire_in", wb)
        call("ciuic_codec_decode_add_encode", self._h, _bytes(wire_in, "wire_in"), _floats(local, "local"), n, step,
             _bytes(out, "out", wb, True), wb)
        return out


class CodecState:
    """One tensor's error-feedback state (residual, PowerSGD Q, step) for `n` elements of `codec`."""

    def __init__(self, codec, n):
        n = _count(n, "n")
        handle = ctypes.c_void_p()
        call("ciuic_codec_state_create", codec._h, n, ctypes.byref(handle))
        self._h = handle
        self.codec = codec
        self.n = n

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value and _lib._lib is not None:
            _lib._lib.ciuic_codec_state_destroy(h)
            self._h = None

    @property
    def step(self):
        step = ctypes.c_uint64()
        call("ciuic_codec_state_info", self._h, None, ctypes.byref(step))
        return step.value

    def residual(self):
        """A copy of the residual (zeros before the first encode)."""
        out = np.empty(self.n, np.float32)
        call("ciuic_codec_state_residual", self._h, _floats(out, "out"), self.n)
        return out

    def set_residual(self, values):
        values = np.ascontiguousarray(values, dtype=np.float32)
        call("ciuic_codec_state_set_residual", self._h, _floats(values, "values", self.n), self.n)

    def to_bytes(self):
        size = ctypes.c_size_t()
        call("ciuic_codec_state_save", self._h, None, 0, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        call("ciuic_codec_state_save", self._h, buf, size.value, ctypes.byref(size))
        return buf.raw[:size.value]

    def load_bytes(self, data):
        """Replaces the state with to_bytes() output; bad bytes raise InputError and change nothing."""
        data = bytes(data)
        call("ciuic_codec_state_load", self._h, data, len(data))

    @classmethod
    def from_bytes(cls, codec, n, data):
        st = cls(codec, n)
        st.load_bytes(data)
        return st
