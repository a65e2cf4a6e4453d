"""XXH3-64 (seed 0, default secret): the hash the agent uses for parameter
digests, shard hashes and manifest trailers.

The agent checks that a staged shard's bytes hash to the ``hash`` of its
``ckpt_staged``, so the worker must compute exactly XXH3-64.  Where the agent
runs, ``libxxhash.so.0`` is installed (the agent links it), and this module
calls it through :mod:`ctypes` — gigabytes per second.  Elsewhere it falls
back to a pure-Python port of the reference algorithm (xxhash.h v0.8), which
is exact but slow (a few MB/s): fine for tests and small states.

:class:`Hasher` hashes a sequence of pieces as one byte string (the
streaming API), so a state is hashed without concatenating its tensors.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import struct
from typing import Iterable, List, Optional, Union

__all__ = ["xxh3_64", "Hasher", "native", "Buffer"]

Buffer = Union[bytes, bytearray, memoryview]

_M64 = (1 << 64) - 1
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P64_4, P64_5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
PMX1, PMX2 = 0x165667919E3779F9, 0x9FB21C651E98DF25

_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
_SECRET_SIZE = len(_SECRET)  # 192
_STRIPE = 64
_STRIPES_PER_BLOCK = (_SECRET_SIZE - _STRIPE) // 8  # 16
_BLOCK = _STRIPE * _STRIPES_PER_BLOCK  # 1024


def _r64(b: Buffer, i: int) -> int:
    return int.from_bytes(b[i:i + 8], "little")


def _r32(b: Buffer, i: int) -> int:
    return int.from_bytes(b[i:i + 4], "little")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _swap64(x: int) -> int:
    return int.from_bytes(x.to_bytes(8, "little"), "big")


def _fold(a: int, b: int) -> int:
    p = a * b
    return (p ^ (p >> 64)) & _M64


def _avalanche(h: int) -> int:
    h ^= h >> 37
    h = (h * PMX1) & _M64
    return h ^ (h >> 32)


def _xxh64_avalanche(h: int) -> int:
    h ^= h >> 33
    h = (h * P64_2) & _M64
    h ^= h >> 29
    h = (h * P64_3) & _M64
    return h ^ (h >> 32)


def _rrmxmx(h: int, n: int) -> int:
    h ^= _rotl(h, 49) ^ _rotl(h, 24)
    h = (h * PMX2) & _M64
    h ^= (h >> 35) + n
    h = (h * PMX2) & _M64
    return h ^ (h >> 28)


def _mix16(b: Buffer, i: int, s: int) -> int:
    return _fold(_r64(b, i) ^ _r64(_SECRET, s), _r64(b, i + 8) ^ _r64(_SECRET, s + 8))


# secret words at every byte offset the long loop reads (offset n*8 and 121, 129, …)
_SEC_AT = {off: struct.unpack_from("<8Q", _SECRET, off) for off in
           list(range(0, _SECRET_SIZE - _STRIPE + 1, 8)) + [_SECRET_SIZE - _STRIPE - 7]}


def _accumulate(acc: List[int], lanes, sec) -> None:
    for i in range(8):
        v = lanes[i]
        k = v ^ sec[i]
        acc[i ^ 1] = (acc[i ^ 1] + v) & _M64
        acc[i] = (acc[i] + (k & 0xFFFFFFFF) * (k >> 32)) & _M64


def _scramble(acc: List[int]) -> None:
    sec = struct.unpack_from("<8Q", _SECRET, _SECRET_SIZE - _STRIPE)
    for i in range(8):
        a = acc[i]
        a ^= a >> 47
        a ^= sec[i]
        acc[i] = (a * P32_1) & _M64


def _long(b: Buffer, n: int) -> int:
    acc = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1]
    nb_blocks = (n - 1) // _BLOCK
    for blk in range(nb_blocks):
        base = blk * _BLOCK
        words = struct.unpack_from("<128Q", b, base)
        for s in range(_STRIPES_PER_BLOCK):
            _accumulate(acc, words[8 * s:8 * s + 8], _SEC_AT[8 * s])
        _scramble(acc)
    base = nb_blocks * _BLOCK
    nb_stripes = ((n - 1) - base) // _STRIPE
    for s in range(nb_stripes):
        _accumulate(acc, struct.unpack_from("<8Q", b, base + s * _STRIPE), _SEC_AT[8 * s])
    _accumulate(acc, struct.unpack_from("<8Q", b, n - _STRIPE), _SEC_AT[_SECRET_SIZE - _STRIPE - 7])
    result = (n * P64_1) & _M64
    for i in range(4):
        s = 11 + 16 * i
        result += _fold(acc[2 * i] ^ _r64(_SECRET, s), acc[2 * i + 1] ^ _r64(_SECRET, s + 8))
    return _avalanche(result & _M64)


def _py_xxh3_64(data: Buffer) -> int:
    b = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    n = len(b)
    if n == 0:
        return _xxh64_avalanche(_r64(_SECRET, 56) ^ _r64(_SECRET, 64))
    if n <= 3:
        c = (b[0] << 16) | (b[n >> 1] << 24) | b[n - 1] | (n << 8)
        return _xxh64_avalanche(c ^ (_r32(_SECRET, 0) ^ _r32(_SECRET, 4)))
    if n <= 8:
        bitflip = _r64(_SECRET, 8) ^ _r64(_SECRET, 16)
        x = (_r32(b, n - 4) + (_r32(b, 0) << 32)) ^ bitflip
        return _rrmxmx(x, n)
    if n <= 16:
        lo = _r64(b, 0) ^ (_r64(_SECRET, 24) ^ _r64(_SECRET, 32))
        hi = _r64(b, n - 8) ^ (_r64(_SECRET, 40) ^ _r64(_SECRET, 48))
        return _avalanche((n + _swap64(lo) + hi + _fold(lo, hi)) & _M64)
    if n <= 128:
        acc = n * P64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(b, 48, 96) + _mix16(b, n - 64, 112)
                acc += _mix16(b, 32, 64) + _mix16(b, n - 48, 80)
            acc += _mix16(b, 16, 32) + _mix16(b, n - 32, 48)
        acc += _mix16(b, 0, 0) + _mix16(b, n - 16, 16)
        return _avalanche(acc & _M64)
    if n <= 240:
        acc = n * P64_1
        for i in range(8):
            acc += _mix16(b, 16 * i, 16 * i)
        acc = _avalanche(acc & _M64)
        for i in range(8, n // 16):
            acc += _mix16(b, 16 * i, 16 * (i - 8) + 3)
        acc += _mix16(b, n - 16, 136 - 17)
        return _avalanche(acc & _M64)
    return _long(b, n)


# ---- libxxhash ---------------------------------------------------------------

_lib: Optional[ctypes.CDLL] = None
_lib_tried = False


def _load() -> Optional[ctypes.CDLL]:
    global _lib, _lib_tried
    if _lib_tried:
        return _lib
    _lib_tried = True
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.XXH3_64bits.restype = ctypes.c_uint64
            lib.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            lib.XXH3_createState.restype = ctypes.c_void_p
            lib.XXH3_freeState.argtypes = [ctypes.c_void_p]
            lib.XXH3_64bits_reset.argtypes = [ctypes.c_void_p]
            lib.XXH3_64bits_update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            lib.XXH3_64bits_digest.restype = ctypes.c_uint64
            lib.XXH3_64bits_digest.argtypes = [ctypes.c_void_p]
        except (OSError, AttributeError):
            continue
        _lib = lib
        break
    return _lib


def native() -> bool:
    """True when libxxhash is used (fast); False for the pure-Python port."""
    return _load() is not None


def _ptr(data: Buffer):
    """(address, length, keepalive) of a contiguous buffer, without copying
    writable ones; read-only buffers (bytes) are passed by their own address."""
    mv = memoryview(data)
    if not mv.contiguous:
        raise ValueError("xxh3: buffer is not contiguous")
    n = mv.nbytes
    if n == 0:
        return None, 0, None
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p), n, data
    if mv.readonly:
        b = bytes(mv)
        return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p), n, b
    arr = (ctypes.c_char * n).from_buffer(mv.cast("B"))
    # By address, not ctypes.cast: cast() ties the array into a reference
    # cycle, so its export of the buffer outlived this call until the next
    # garbage collection, and closing an mmap then failed ("cannot close
    # exported pointers exist": the staging memfd at exit).
    return ctypes.c_void_p(ctypes.addressof(arr)), n, arr


def xxh3_64(data: Buffer) -> int:
    """XXH3-64 of ``data`` (seed 0): the value ``xxhsum -H3`` prints."""
    lib = _load()
    if lib is None:
        return _py_xxh3_64(data)
    p, n, keep = _ptr(data)
    h = int(lib.XXH3_64bits(p, n))
    del keep
    return h


class Hasher:
    """XXH3-64 of several pieces as if concatenated.

    ``Hasher().update(a).update(b).digest() == xxh3_64(a + b)``.  Without
    libxxhash the pieces are gathered and hashed at :meth:`digest`.
    """

    def __init__(self) -> None:
        self._lib = _load()
        self._state = None
        self._parts: Optional[bytearray] = None
        if self._lib is not None:
            self._state = self._lib.XXH3_createState()
            if not self._state:
                raise MemoryError("XXH3_createState")
            self._lib.XXH3_64bits_reset(self._state)
        else:
            self._parts = bytearray()

    def update(self, data: Buffer) -> "Hasher":
        if self._lib is None:
            self._parts += memoryview(data).cast("B")
            return self
        p, n, keep = _ptr(data)
        if n:
            self._lib.XXH3_64bits_update(self._state, p, n)
        del keep
        return self

    def update_all(self, pieces: Iterable[Buffer]) -> "Hasher":
        for p in pieces:
            self.update(p)
        return self

    def digest(self) -> int:
        if self._lib is None:
            return _py_xxh3_64(self._parts)
        return int(self._lib.XXH3_64bits_digest(self._state))

    def __del__(self) -> None:
        if getattr(self, "_state", None) and self._lib is not None:
            self._lib.XXH3_freeState(self._state)
            self._state = None
