"""A bounded msgpack pull reader: the Python twin of base/mpread.c.

The protocol decoder needs more than ``msgpack.unpackb`` gives: it must tell
which key was truncated or of the wrong type, see duplicate keys, bound the
nesting of values it skips, and accept exactly what the agent's reader accepts
(a uint written with a signed marker, an int where a float is expected).  So
this reader pulls one value at a time from ``(buf, pos, end)`` and fails with
one of three codes, as ``ea__mpr_*`` does: ``EOF`` (the value runs past the
end), ``TYPE`` (another msgpack type is there), ``RANGE`` (the value or its
length is over the caller's limit).  It never allocates from a length before
checking the bytes behind it are present.
"""
from __future__ import annotations

import struct

EOF = -1
TYPE = -2
RANGE = -3

_STRERROR = {EOF: "truncated", TYPE: "wrong type", RANGE: "out of range"}


def strerror(code: int) -> str:
    """``ea__mpr_strerror``: "truncated", "wrong type", "out of range"."""
    return _STRERROR.get(code, "invalid")


class MprError(Exception):
    """A read failed; ``code`` is EOF, TYPE or RANGE.  The position is unchanged."""

    def __init__(self, code: int) -> None:
        super().__init__(strerror(code))
        self.code = code


_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

# marker → (payload width, signed)
_INT_MARK = {
    0xCC: (1, False), 0xCD: (2, False), 0xCE: (4, False), 0xCF: (8, False),
    0xD0: (1, True), 0xD1: (2, True), 0xD2: (4, True), 0xD3: (8, True),
}


class Reader:
    """Reads msgpack values from ``buf[pos:end]``; every method either consumes
    exactly one value and returns it or raises :class:`MprError` and consumes
    nothing."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def left(self) -> int:
        return self.end - self.pos

    def _be(self, at: int, width: int) -> int:
        return int.from_bytes(self.buf[at:at + width], "big")

    def uint(self, maximum: int = _U64_MAX) -> int:
        """A non-negative int of any width, signed markers included (as
        ``ea__mpr_uint``); a negative value is RANGE, not TYPE."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t <= 0x7F:
            if t > maximum:
                raise MprError(RANGE)
            self.pos += 1
            return t
        mark = _INT_MARK.get(t)
        if mark is None:
            raise MprError(RANGE if t >= 0xE0 else TYPE)
        w, sgn = mark
        if self.left() - 1 < w:
            raise MprError(EOF)
        if sgn and self.buf[self.pos + 1] & 0x80:
            raise MprError(RANGE)
        x = self._be(self.pos + 1, w)
        if x > maximum:
            raise MprError(RANGE)
        self.pos += 1 + w
        return x

    def int(self, lo: int = _I64_MIN, hi: int = _I64_MAX) -> int:
        """A signed int of any width within [lo, hi] (``ea__mpr_int``)."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t <= 0x7F or t >= 0xE0:
            x = t - 256 if t >= 0xE0 else t
            if x < lo or x > hi:
                raise MprError(RANGE)
            self.pos += 1
            return x
        mark = _INT_MARK.get(t)
        if mark is None:
            raise MprError(TYPE)
        w, sgn = mark
        if self.left() - 1 < w:
            raise MprError(EOF)
        u = self._be(self.pos + 1, w)
        if sgn:
            if u >> (8 * w - 1):
                u -= 1 << (8 * w)
            x = u
        else:
            if u > _I64_MAX:
                raise MprError(RANGE)
            x = u
        if x < lo or x > hi:
            raise MprError(RANGE)
        self.pos += 1 + w
        return x

    def float(self) -> float:
        """A float32/float64, or an int of any width (``ea__mpr_float``)."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t in (0xCA, 0xCB):
            w = 4 if t == 0xCA else 8
            if self.left() - 1 < w:
                raise MprError(EOF)
            (v,) = struct.unpack(">f" if w == 4 else ">d", bytes(self.buf[self.pos + 1:self.pos + 1 + w]))
            self.pos += 1 + w
            return float(v)
        try:
            return float(self.int())
        except MprError as e:
            if e.code != RANGE:
                raise
        return float(self.uint())

    def bool(self) -> bool:
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t not in (0xC2, 0xC3):
            raise MprError(TYPE)
        self.pos += 1
        return t == 0xC3

    def _take(self, hw: int, n: int, maximum: int) -> bytes:
        left = self.left()
        if left < hw or n > left - hw:
            raise MprError(EOF)
        if n > maximum:
            raise MprError(RANGE)
        start = self.pos + hw
        self.pos = start + n
        return bytes(self.buf[start:start + n])

    def _hdr(self, w: int) -> int:
        if self.left() - 1 < w:
            raise MprError(EOF)
        return self._be(self.pos + 1, w)

    def str(self, maximum: int) -> bytes:
        """The raw bytes of a str of at most ``maximum`` bytes (no UTF-8 check,
        as in the agent)."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t & 0xE0 == 0xA0:
            return self._take(1, t & 0x1F, maximum)
        w = {0xD9: 1, 0xDA: 2, 0xDB: 4}.get(t)
        if w is None:
            raise MprError(TYPE)
        return self._take(1 + w, self._hdr(w), maximum)

    def bin(self, maximum: int) -> bytes:
        if self.pos >= self.end:
            raise MprError(EOF)
        w = {0xC4: 1, 0xC5: 2, 0xC6: 4}.get(self.buf[self.pos])
        if w is None:
            raise MprError(TYPE)
        return self._take(1 + w, self._hdr(w), maximum)

    def array(self) -> int:
        """An array header; returns the element count (not checked against the
        bytes left: the caller does, as ``ea__mpr_array``'s callers do)."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t & 0xF0 == 0x90:
            self.pos += 1
            return t & 0x0F
        w = {0xDC: 2, 0xDD: 4}.get(t)
        if w is None:
            raise MprError(TYPE)
        n = self._hdr(w)
        self.pos += 1 + w
        return n

    def map(self) -> int:
        """A map header; a count larger than the pairs the bytes left can hold
        is EOF before anything loops on it."""
        if self.pos >= self.end:
            raise MprError(EOF)
        t = self.buf[self.pos]
        if t & 0xF0 == 0x80:
            w, n = 0, t & 0x0F
        elif t in (0xDE, 0xDF):
            w = 2 if t == 0xDE else 4
            n = self._hdr(w)
        else:
            raise MprError(TYPE)
        if n > (self.left() - 1 - w) // 2:
            raise MprError(EOF)
        self.pos += 1 + w
        return n

    def skip(self, max_depth: int) -> None:
        """Skip one well-formed value nested at most ``max_depth`` deep
        (``ea__mpr_skip``)."""
        save = self.pos
        try:
            self._skip(0, max_depth)
        except MprError:
            self.pos = save
            raise

    def _skip(self, depth: int, max_depth: int) -> None:
        if self.pos >= self.end:
            raise MprError(EOF)
        if depth > max_depth:
            raise MprError(RANGE)
        t = self.buf[self.pos]
        left = self.left()
        hw, n, kind = 1, 0, 0  # kind 0: n payload bytes, 1: n elements, 2: n pairs
        if t <= 0x7F or t >= 0xE0 or t in (0xC0, 0xC2, 0xC3):
            n = 0
        elif t & 0xE0 == 0xA0:
            n = t & 0x1F
        elif t & 0xF0 == 0x90:
            n, kind = t & 0x0F, 1
        elif t & 0xF0 == 0x80:
            n, kind = t & 0x0F, 2
        else:
            fixed = {0xCC: 1, 0xD0: 1, 0xCD: 2, 0xD1: 2, 0xCA: 4, 0xCE: 4, 0xD2: 4,
                     0xCB: 8, 0xCF: 8, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
            lenw = {0xC4: (1, 0), 0xD9: (1, 0), 0xC5: (2, 0), 0xDA: (2, 0), 0xC6: (4, 0),
                    0xDB: (4, 0), 0xC7: (1, 0), 0xC8: (2, 0), 0xC9: (4, 0),
                    0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}
            if t in fixed:
                n = fixed[t]
            elif t in lenw:
                lw, kind = lenw[t]
                if left - 1 < lw:
                    raise MprError(EOF)
                n = self._be(self.pos + 1, lw)
                hw = 1 + lw
                if 0xC7 <= t <= 0xC9:
                    n += 1  # the ext type byte
            else:
                raise MprError(TYPE)  # 0xc1, never used
        if kind == 0:
            if left < hw or n > left - hw:
                raise MprError(EOF)
            self.pos += hw + n
            return
        if left < hw:
            raise MprError(EOF)
        elems = 2 * n if kind == 2 else n
        if elems > left - hw:
            raise MprError(EOF)
        self.pos += hw
        for _ in range(elems):
            self._skip(depth + 1, max_depth)
