"""The flat state: a deterministic, self-describing byte layout of a training
state, the unit of state broadcast and of checkpoints.

Ranks that completed the same step hold bit-identical states, and each stages
its 1/W byte range of the flat state into the checkpoint (the agents write
the W ranges as shards), so the layout must depend on nothing but the state
itself: tensors in a fixed order at 64-byte aligned offsets, zero padding,
and everything that is not a tensor in one canonical msgpack blob.  Format
"ea-state-1"::

    bytes [0, 32)   preamble, little-endian
                      0  magic        b"EASTATE\\0"
                      8  u32 version  1
                     12  u32 reserved 0
                     16  u64 H        header bytes (preamble + table), a multiple of 64
                     24  u64 T        total bytes of the state
    bytes [32, H)   the tensor table, ASCII, NUL padded:
                      "tensors N\\n"
                      "tensor NAME DTYPE SHAPE OFFSET LENGTH\\n"   N lines
                      "end\\n"
    bytes [H, T)    tensor data, each at its OFFSET (a multiple of 64), in
                    table order, zero padding between; T is the end of the
                    last tensor

A table line has exactly the syntax of a MANIFEST ``tensor`` line
(docs/checkpoints.md): NAME printable ASCII without spaces, < 128 bytes;
DTYPE one of :data:`DTYPE_SIZE`; SHAPE ``-`` for a scalar or dimensions
joined by ``x`` (``24x256``), at most 8; OFFSET and LENGTH absolute, in
bytes.  So an agent can copy the table into the manifest unchanged, and a
checkpoint is readable without the program that wrote it.  The tensor named
``meta`` (``u8``) holds the canonical msgpack of the non-tensor parts
(:func:`pack_meta`).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import msgpack
import xxhash

from .errors import StateError

__all__ = [
    "MAGIC", "VERSION", "ALIGN", "PREAMBLE", "DTYPE_SIZE", "TensorSpec", "FlatState",
    "split_range", "parse_header", "check_name", "pack_meta", "unpack_meta", "TensorRef",
]

MAGIC = b"EASTATE\0"
VERSION = 1
#: Tensor offsets and the header length are multiples of this: the widest
#: cache line and every dtype's alignment, so a tensor can be viewed in place.
ALIGN = 64
PREAMBLE = 32
NAME_MAX = 128  # EA_CKPT_TENSOR_NAME_MAX
MAX_DIMS = 8  # EA_CKPT_MAX_DIMS
_PRE = struct.Struct("<8sIIQQ")

Buffer = Union[bytes, bytearray, memoryview]

#: Bytes per element of every dtype the format knows.
DTYPE_SIZE: Dict[str, int] = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1,
    "u8": 1, "bool": 1, "c64": 8, "c128": 16,
}


def split_range(total: int, world: int, rank: int) -> Tuple[int, int]:
    """``[⌊rank·total/world⌋, ⌊(rank+1)·total/world⌋)``: rank's part of ``total``
    items — its shard of a state's bytes (``ea_ckpt_shard_range``) and its
    slice of a global batch (the built-in trainer's split).  Ranks 0…W-1 cover
    ``[0, total)`` exactly once.  Raises ValueError for world < 1 or a rank
    outside ``[0, world)``."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError("split_range: rank %d not in [0, world %d)" % (rank, world))
    return rank * total // world, (rank + 1) * total // world


def check_name(name: str, what: str = "tensor") -> None:
    """Raise StateError unless ``name`` can be a table (and MANIFEST) name."""
    try:
        b = name.encode("ascii")
    except UnicodeEncodeError:
        raise StateError("%s name %r: not ASCII (a MANIFEST name is printable ASCII)" % (what, name))
    if not 0 < len(b) < NAME_MAX:
        raise StateError("%s name %r: must be 1 to %d bytes" % (what, name, NAME_MAX - 1))
    if any(c <= 0x20 or c >= 0x7F for c in b):
        raise StateError("%s name %r: contains a space or control character" % (what, name))


@dataclass(frozen=True)
class TensorSpec:
    """One line of the tensor table."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    length: int

    def shape_str(self) -> str:
        return "x".join(str(d) for d in self.shape) if self.shape else "-"

    def describe(self) -> str:
        """"f32 8x4", as the mismatch messages say it."""
        return "%s %s" % (self.dtype, self.shape_str())

    def line(self) -> str:
        return "tensor %s %s %s %d %d\n" % (self.name, self.dtype, self.shape_str(),
                                            self.offset, self.length)


#: A tensor's bytes: a contiguous buffer, or a function giving bytes [a, b)
#: of them (a device tensor copied to the host piece by piece).
Source = Union[Buffer, Callable[[int, int], Buffer]]


@dataclass
class TensorRef:
    """A tensor to lay out: its identity and its bytes (``data`` may be None
    for a zero-length tensor)."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    data: Optional[Source]
    keep: Any = None  # whatever keeps ``data`` valid (the tensor it views)

    @property
    def nbytes(self) -> int:
        return DTYPE_SIZE[self.dtype] * math.prod(self.shape)

    def read(self, a: int, b: int) -> memoryview:
        """Bytes [a, b) of the tensor."""
        if callable(self.data):
            return memoryview(self.data(a, b)).cast("B")
        return memoryview(self.data).cast("B")[a:b]  # type: ignore[arg-type]


def _pad(n: int) -> int:
    return -n % ALIGN


class FlatState:
    """A laid-out state: the header bytes, the table and a byte view of each
    tensor.  Nothing is copied until :meth:`to_bytes` or :meth:`copy_range`;
    the views must stay valid (unchanged) while the object is used.

    Raises StateError for a bad name, dtype, shape or a view of the wrong size.
    """

    def __init__(self, tensors: Sequence[TensorRef]) -> None:
        seen = set()
        for t in tensors:
            check_name(t.name)
            if t.name in seen:
                raise StateError("tensor %s: appears twice" % t.name)
            seen.add(t.name)
            if t.dtype not in DTYPE_SIZE:
                raise StateError("tensor %s: unsupported dtype %r" % (t.name, t.dtype))
            if len(t.shape) > MAX_DIMS:
                raise StateError("tensor %s: %d dimensions, at most %d" % (t.name, len(t.shape), MAX_DIMS))
            n = 0 if t.data is None else (t.nbytes if callable(t.data) else memoryview(t.data).nbytes)
            if n != t.nbytes:
                raise StateError("tensor %s: %d bytes of data for %s %s" % (
                    t.name, n, t.dtype, "x".join(map(str, t.shape)) or "-"))
        self.tensors = list(tensors)
        # The header's length depends on the offsets' digits and they on it:
        # iterate to the fixed point (two rounds at most in practice).
        h = ALIGN
        while True:
            specs, off = [], h
            for t in self.tensors:
                off += _pad(off)
                specs.append(TensorSpec(t.name, t.dtype, tuple(int(d) for d in t.shape), off, t.nbytes))
                off += t.nbytes
            table = ("tensors %d\n" % len(specs) + "".join(s.line() for s in specs) + "end\n").encode()
            need = PREAMBLE + len(table)
            need += _pad(need)
            if need <= h:
                break
            h = need
        self.header_bytes = h
        self.total = off if self.tensors else h
        self.specs: List[TensorSpec] = specs
        self.header = (_PRE.pack(MAGIC, VERSION, 0, h, self.total) + table).ljust(h, b"\0")

    def pieces(self) -> Iterator[Tuple[int, int, Callable[[int, int], memoryview]]]:
        """(offset, length, read) of everything that is not zero padding, in
        order; ``read(a, b)`` gives bytes [a, b) of the piece."""
        hdr = memoryview(self.header)
        yield 0, len(self.header), lambda a, b: hdr[a:b]
        for s, t in zip(self.specs, self.tensors):
            if s.length:
                yield s.offset, s.length, t.read

    def _walk(self, lo: int, hi: int) -> Iterator[Tuple[int, Buffer]]:
        """(position, bytes) covering [lo, hi) exactly, zeros for padding."""
        if not 0 <= lo <= hi <= self.total:
            raise ValueError("range [%d, %d) outside the %d-byte state" % (lo, hi, self.total))
        pos = lo
        for off, n, read in self.pieces():
            end = off + n
            if end <= lo:
                continue
            if off >= hi:
                break
            if off > pos:
                yield pos, bytes(off - pos)
                pos = off
            a, b = max(off, lo), min(end, hi)
            yield a, read(a - off, b - off)
            pos = b
        if pos < hi:
            yield pos, bytes(hi - pos)

    def copy_range(self, dst: Buffer, lo: int, hi: int) -> None:
        """Write bytes [lo, hi) of the state to ``dst[0 : hi-lo]`` (padding as
        zeros).  ``dst`` must be writable and at least hi-lo bytes."""
        out = memoryview(dst).cast("B")
        try:
            for pos, data in self._walk(lo, hi):
                n = memoryview(data).nbytes
                out[pos - lo:pos - lo + n] = data
        finally:
            out.release()

    def hash_range(self, lo: int = 0, hi: Optional[int] = None) -> int:
        """XXH3-64 of bytes [lo, hi) without building them."""
        h = xxhash.xxh3_64()
        for _pos, data in self._walk(lo, self.total if hi is None else hi):
            h.update(data)
        return h.intdigest()

    def to_bytes(self) -> bytearray:
        """The whole state as one writable buffer."""
        buf = bytearray(self.total)
        self.copy_range(buf, 0, self.total)
        return buf


def parse_header(buf: Buffer, what: str = "state") -> Tuple[List[TensorSpec], int, int]:
    """Parse and check the preamble and tensor table of a flat state held in
    ``buf`` (at least its first H bytes).  Returns (specs, H, T).

    Raises StateError naming what is wrong: the magic ("not an elastic_agent
    state"), the version, a table line, a tensor outside the state, overlaps.
    """
    mv = memoryview(buf).cast("B")
    if mv.nbytes < PREAMBLE:
        raise StateError("%s: %d bytes, shorter than the %d-byte preamble" % (what, mv.nbytes, PREAMBLE))
    magic, version, _res, h, total = _PRE.unpack(mv[:PREAMBLE])
    if magic != MAGIC:
        raise StateError("%s: not an elastic_agent state (magic %r, expected %r)" % (what, bytes(magic), MAGIC))
    if version != VERSION:
        raise StateError("%s: format version %d, this library reads %d" % (what, version, VERSION))
    if h % ALIGN or h < PREAMBLE or h > total or h > mv.nbytes:
        raise StateError("%s: header of %d bytes does not fit (total %d, have %d)" % (what, h, total, mv.nbytes))
    try:
        text = bytes(mv[PREAMBLE:h]).rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        raise StateError("%s: tensor table is not ASCII" % what)
    lines = text.split("\n")
    if not lines or not lines[0].startswith("tensors "):
        raise StateError("%s: table line 1: expected \"tensors N\"" % what)
    try:
        n = int(lines[0][8:])
    except ValueError:
        raise StateError("%s: table line 1: expected \"tensors N\"" % what)
    if len(lines) < n + 2 or lines[n + 1] != "end":
        raise StateError("%s: table: expected %d tensor lines and \"end\"" % (what, n))
    specs: List[TensorSpec] = []
    pos = h
    for i in range(n):
        f = lines[1 + i].split(" ")
        where = "%s: table line %d" % (what, i + 2)
        if len(f) != 6 or f[0] != "tensor":
            raise StateError(where + ": expected \"tensor NAME DTYPE SHAPE OFFSET LENGTH\"")
        name, dtype, shape_s, off_s, len_s = f[1:]
        if dtype not in DTYPE_SIZE:
            raise StateError("%s: tensor %s: unknown dtype %r" % (where, name, dtype))
        try:
            shape = () if shape_s == "-" else tuple(int(d) for d in shape_s.split("x"))
            off, length = int(off_s), int(len_s)
        except ValueError:
            raise StateError("%s: tensor %s: bad shape, offset or length" % (where, name))
        if len(shape) > MAX_DIMS or any(d < 0 for d in shape):
            raise StateError("%s: tensor %s: bad shape %s" % (where, name, shape_s))
        if length != DTYPE_SIZE[dtype] * math.prod(shape):
            raise StateError("%s: tensor %s: %d bytes for %s %s" % (where, name, length, dtype, shape_s))
        if off < pos or off % ALIGN or off + length > total:
            raise StateError("%s: tensor %s: [%d, +%d) overlaps or leaves the %d-byte state"
                             % (where, name, off, length, total))
        pos = off + length
        specs.append(TensorSpec(name, dtype, shape, off, length))
    return specs, h, total


# ---- the canonical msgpack of everything that is not a tensor -------------------

_EXT_TENSOR = 1  # a reference to a tensor of the table, by name
_EXT_TUPLE = 2  # a tuple (msgpack has only arrays)


def _key_order(k: Any) -> Tuple[int, Any]:
    return ({bool: 0, int: 1, float: 2, str: 3, bytes: 4}.get(type(k), 9), k)


def _canon(x: Any, path: str) -> Any:
    if x is None or type(x) in (bool, str, bytes):
        return x
    if type(x) is int:
        if not -(1 << 63) <= x < (1 << 64):
            raise StateError("%s: integer %d does not fit in 64 bits" % (path, x))
        return x
    if type(x) is float:
        return x
    if isinstance(x, TensorName):
        return msgpack.ExtType(_EXT_TENSOR, x.encode())
    if isinstance(x, tuple):
        return msgpack.ExtType(_EXT_TUPLE, _packb([_canon(v, "%s[%d]" % (path, i)) for i, v in enumerate(x)]))
    if isinstance(x, list):
        return [_canon(v, "%s[%d]" % (path, i)) for i, v in enumerate(x)]
    if isinstance(x, dict):
        for k in x:
            if type(k) not in (bool, int, float, str, bytes):
                raise StateError("%s: dict key %r of type %s cannot be serialised" % (path, k, type(k).__name__))
        items = sorted(x.items(), key=lambda kv: _key_order(kv[0]))
        return {k: _canon(v, "%s.%s" % (path, k)) for k, v in items}
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise StateError("%s: cannot serialise a %s (use a tensor, a number, a string, "
                     "bytes, or lists/tuples/dicts of them)" % (path, type(x).__name__))


class TensorName(str):
    """A placeholder in a meta tree for the table tensor of this name."""


def _packb(x: Any) -> bytes:
    return msgpack.packb(x, use_bin_type=True, strict_types=True)


def pack_meta(tree: Any, path: str = "meta") -> bytes:
    """Canonical msgpack of a tree of plain values: dict keys sorted, tuples
    kept as tuples, :class:`TensorName` placeholders for tensors.  Equal trees
    give equal bytes.  Raises StateError naming the path of a value that
    cannot be serialised."""
    return _packb(_canon(tree, path))


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TENSOR:
        return TensorName(data.decode())
    if code == _EXT_TUPLE:
        return tuple(unpack_meta(data))
    return msgpack.ExtType(code, data)


def unpack_meta(b: Buffer) -> Any:
    """The inverse of :func:`pack_meta` (StateError for malformed bytes)."""
    try:
        return msgpack.unpackb(bytes(b), raw=False, strict_map_key=False, ext_hook=_ext_hook,
                               use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise StateError("meta: malformed (%s)" % e)
