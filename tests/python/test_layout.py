"""The flat state's format, the 1/W ranges, the canonical meta, and XXH3."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import random
import struct

import pytest
import xxhash

from conftest import SEED
from elastic_agent import split_range
from elastic_agent.errors import StateError
from elastic_agent.layout import (ALIGN, MAGIC, FlatState, TensorName, TensorRef, pack_meta,
                                  parse_header, unpack_meta)
from elastic_agent.state import ObjectState
from elastic_agent import xxh3


@pytest.mark.parametrize("world", range(1, 9))
def test_ranges_cover_everything_exactly_once(world):
    """⌊rB/W⌋ … ⌊(r+1)B/W⌋: the data split of the built-in trainer and the
    shard split of ea_ckpt_shard_range, for every B up to 100 and W = 1…8."""
    for total in list(range(0, 101)) + [2 ** 40 + 7, 2 ** 64 - 1]:
        parts = [split_range(total, world, r) for r in range(world)]
        assert parts[0][0] == 0 and parts[-1][1] == total
        for (a, b), (c, d) in zip(parts, parts[1:]):
            assert b == c and a <= b
        sizes = [b - a for a, b in parts]
        assert max(sizes) - min(sizes) <= 1
        for r, (a, b) in enumerate(parts):  # the formula itself, as the agent computes it
            q, m = divmod(total, world)
            assert (a, b) == (q * r + m * r // world, q * (r + 1) + m * (r + 1) // world)


def test_range_arguments():
    with pytest.raises(ValueError):
        split_range(10, 0, 0)
    with pytest.raises(ValueError):
        split_range(10, 2, 2)


def _flat():
    rnd = random.Random(SEED)
    return FlatState([
        TensorRef("model.w", "f32", (3, 5), bytes(rnd.getrandbits(8) for _ in range(60))),
        TensorRef("model.empty", "f32", (0, 4), None),
        TensorRef("scalar", "i64", (), struct.pack("<q", -5)),
        TensorRef("flags", "bool", (7,), bytes([1, 0, 1, 1, 0, 0, 1])),
        TensorRef("meta", "u8", (11,), b"hello world"),
    ])


def test_format_is_self_describing():
    f = _flat()
    b = f.to_bytes()
    assert b[:8] == MAGIC and len(b) == f.total
    version, _, h, total = struct.unpack_from("<IIQQ", b, 8)
    assert (version, h, total) == (1, f.header_bytes, f.total) and h % ALIGN == 0
    text = bytes(b[32:h]).rstrip(b"\0").decode()
    assert text == ("tensors 5\n"
                    "tensor model.w f32 3x5 192 60\n"
                    "tensor model.empty f32 0x4 256 0\n"
                    "tensor scalar i64 - 256 8\n"
                    "tensor flags bool 7 320 7\n"
                    "tensor meta u8 11 384 11\n"
                    "end\n")
    specs, h2, t2 = parse_header(b)
    assert (h2, t2) == (h, total) and specs == f.specs
    assert all(s.offset % ALIGN == 0 for s in specs)
    assert bytes(b[384:395]) == b"hello world"
    assert bytes(b[327:384]) == bytes(57) and bytes(b[252:256]) == bytes(4)  # zero padding


def test_ranges_and_hashes_of_the_layout():
    f = _flat()
    b = bytes(f.to_bytes())
    rnd = random.Random(SEED)
    for _ in range(200):
        lo = rnd.randrange(0, f.total + 1)
        hi = rnd.randrange(lo, f.total + 1)
        buf = bytearray(hi - lo)
        f.copy_range(buf, lo, hi)
        assert bytes(buf) == b[lo:hi]
        assert f.hash_range(lo, hi) == xxh3.xxh3_64(b[lo:hi])
    with pytest.raises(ValueError):
        f.copy_range(bytearray(10), 0, f.total + 1)


@pytest.mark.parametrize("refs,error", [
    ([TensorRef("a b", "u8", (1,), b"x")], "contains a space"),
    ([TensorRef("x" * 128, "u8", (1,), b"x")], "must be 1 to 127 bytes"),
    ([TensorRef("é", "u8", (1,), b"x")], "not ASCII"),
    ([TensorRef("a", "f8", (1,), b"x")], "unsupported dtype"),
    ([TensorRef("a", "u8", (1,) * 9, b"x")], "9 dimensions"),
    ([TensorRef("a", "f32", (2,), b"x")], "1 bytes of data for f32 2"),
    ([TensorRef("a", "u8", (1,), b"x"), TensorRef("a", "u8", (1,), b"y")], "appears twice"),
])
def test_what_cannot_be_laid_out_is_named(refs, error):
    with pytest.raises(StateError, match=error):
        FlatState(refs)


def test_damaged_headers_are_refused():
    b = bytes(_flat().to_bytes())
    with pytest.raises(StateError, match="not an elastic_agent state"):
        parse_header(b"XXSTATE\0" + b[8:])
    with pytest.raises(StateError, match="format version 2"):
        parse_header(b[:8] + struct.pack("<I", 2) + b[12:])
    with pytest.raises(StateError, match="shorter than the 32-byte preamble"):
        parse_header(b[:31])
    bad = bytearray(b)
    bad[32 + len("tensors 5\ntensor model.w f32 3x5 ")] = ord("9")  # offset 992: leaves the state
    with pytest.raises(StateError, match="table line 2: tensor model.w"):
        parse_header(bad)


def test_meta_is_canonical():
    a = {"b": 1, "a": [1.5, (2, "x"), None, True], 3: {"z": b"\x00", "y": TensorName("model.w")}}
    b = {3: {"y": TensorName("model.w"), "z": b"\x00"}, "a": [1.5, (2, "x"), None, True], "b": 1}
    assert pack_meta(a) == pack_meta(b)
    back = unpack_meta(pack_meta(a))
    assert back == a and isinstance(back["a"][1], tuple) and isinstance(back[3]["y"], TensorName)
    with pytest.raises(StateError, match=r"meta.x\[1\]: cannot serialise a set"):
        pack_meta({"x": [1, {2}]})
    with pytest.raises(StateError, match="does not fit in 64 bits"):
        pack_meta({"x": 1 << 70})


def test_object_state_round_trip_and_mismatch():
    s = ObjectState(epoch=3, blob=bytearray(os.urandom(100)), name="run")
    s.step = 17
    b = s.flat().to_bytes()
    t = ObjectState(epoch=0, blob=bytearray(), name="")
    t.load(b)
    assert (t.step, t.epoch, bytes(t.blob), t.name) == (17, 3, bytes(s.blob), "run")
    assert t.flat().to_bytes() == b
    u = ObjectState(epoch=0, other=1)
    with pytest.raises(StateError, match="extras.other: missing"):
        u.load(b, "checkpoint step-17.gen-1")


def _libxxhash():
    """The agent's libxxhash through ctypes, or None where it is not installed."""
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        try:
            lib = ctypes.CDLL(name) if name else None
        except OSError:
            continue
        if lib is not None and hasattr(lib, "XXH3_64bits"):
            lib.XXH3_64bits.restype = ctypes.c_uint64
            lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            return lib
    return None


def test_xxh3_known_values_and_streaming():
    assert xxh3.xxh3_64(b"") == 0x2D06800538D394C2
    assert xxh3.xxh3_64(b"abc") == 0x78AF5F94892F3950
    rnd = random.Random(SEED)
    data = bytes(rnd.getrandbits(8) for _ in range(3000))
    h = xxhash.xxh3_64()
    for i in range(0, 3000, 77):
        h.update(memoryview(data)[i:i + 77])
    assert h.intdigest() == xxh3.xxh3_64(data) == xxh3.xxh3_64(bytearray(data))


@pytest.mark.skipif(_libxxhash() is None, reason="libxxhash.so.0 not installed")
def test_xxh3_matches_the_agents_libxxhash():
    """PyPI's xxhash against the library the agent links, on every length
    class of XXH3 (0-16, 17-128, 129-240, one block and more) and random
    lengths, one-shot and streamed in uneven pieces."""
    lib = _libxxhash()
    rnd = random.Random(SEED)
    data = rnd.randbytes(1 << 18)
    for n in list(range(0, 260)) + [1023, 1024, 1025, 2048, 2049, 3000, 1 << 18] + \
            [rnd.randrange(0, 1 << 18) for _ in range(30)]:
        want = lib.XXH3_64bits(data[:n], n)
        assert xxh3.xxh3_64(data[:n]) == want, n
        h = xxhash.xxh3_64()
        i = 0
        while i < n:
            j = min(n, i + rnd.randrange(1, 5000))
            h.update(data[i:j])
            i = j
        assert h.intdigest() == want, n
