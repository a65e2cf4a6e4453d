"""The agent ↔ worker messages: an exact mirror of train/ipc.c and include/ea_ipc.h.

One message is one msgpack map with string keys, sent as one SOCK_SEQPACKET
packet of at most :data:`MAX_MSG` bytes.  A message is a plain ``dict``:
``{"type": "hello", "pid": 4242, ...}``.  :func:`encode` and :func:`decode`
enforce the agent's grammar and limits, so that whatever this module encodes
the agent decodes, and whatever the agent would reject this module rejects
with the agent's own words::

    packet   = map { "type": str, key: value, … }      (keys in any order)
    uint     = msgpack non-negative int of any width
    int      = msgpack int of any width, signed
    float    = msgpack float32/float64 (an int is accepted too)
    addr     = str "host:port" or "[v6]:port", < ADDR_MAX bytes
    text     = str < TEXT_MAX bytes (UTF-8, not checked)
    path     = str < PATH_MAX bytes

The key table below is ``types[]`` of train/ipc.c, key for key; the encoder
writes ``type`` first and then the keys in the agent's enum order (msgpack-c
and msgpack-python pick the same smallest encodings), so a message encodes to
the very bytes ``ea_ipc_encode`` produces.  The decoder is the agent's
two-pass decoder: find ``type`` wherever it is, then read that type's keys and
skip every other value with a bounded skipper (depth :data:`SKIP_DEPTH_MAX`).
Unknown keys are ignored, which is how both sides add optional keys.

Extensions.  The keys in :data:`EXTENSION_KEYS` are optional additions this
package defines for the agent (docs/pytorch.md, "Agent-side changes
required").  Today's agent skips them as unknown keys, and this package works
without them; they are validated like every other key when present.

Errors are :class:`~elastic_agent.errors.ProtocolError` whose text names the
field exactly as the agent's decoder does: ``"commit.peers[2]: too long"``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import msgpack

from . import _mpread as mpr
from .errors import ProtocolError

__all__ = [
    "MAX_MSG", "MAX_PEERS", "TEXT_MAX", "PATH_MAX", "ADDR_MAX", "NCCL_ID_BYTES",
    "WORKER_FD", "SKIP_DEPTH_MAX", "TYPES", "KEYS", "EXTENSION_KEYS", "LAYOUT_EA_STATE_1",
    "WORKER_TO_AGENT", "AGENT_TO_WORKER", "encode", "decode",
]

#: One packet at most (EA_IPC_MAX_MSG).
MAX_MSG = 65536
#: Ranks a tcp COMMIT can list (EA_IPC_MAX_PEERS).
MAX_PEERS = 512
#: Free-text fields are shorter than this many bytes (EA_IPC_TEXT_MAX).
TEXT_MAX = 256
#: Paths in a COMMIT are shorter than this many bytes (EA_IPC_PATH_MAX).
PATH_MAX = 4096
#: Addresses are shorter than this many bytes (EA_COMM_ADDR_MAX).
ADDR_MAX = 96
#: The NCCL unique id (EA_COMM_NCCL_ID_BYTES).
NCCL_ID_BYTES = 128
#: The fd a worker finds its socketpair end on (EA_IPC_WORKER_FD).
WORKER_FD = 3
#: Nesting the skipper follows inside an unknown value (SKIP_DEPTH_MAX).
SKIP_DEPTH_MAX = 16
#: The ``layout`` value of a ckpt_staged whose state is in this package's
#: self-describing flat format (elastic_agent.layout).
LAYOUT_EA_STATE_1 = "ea-state-1"

# Value kinds.
_U64, _U32, _I32, _F64, _BOOL = "uint", "uint32", "int32", "float", "bool"
_ADDR, _TEXT, _PATH, _PEERS, _NCCL = "addr", "text", "path", "peers", "nccl_id"
_BACKEND, _BUSY, _VERIFY, _TBACKEND, _LAYOUT = "backend", "busy", "verify", "torch_backend", "layout"

_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1

#: Every key, in the agent's enum order (``key`` in train/ipc.c), then the
#: extension keys.  The encoder writes keys in this order.
KEYS: Tuple[Tuple[str, str], ...] = (
    ("gen", _U64), ("pid", _U64), ("local_rank", _U32), ("comm_addr", _ADDR),
    ("next_step", _U64), ("digest", _U64), ("step", _U64), ("loss", _F64),
    ("samples", _U64), ("seconds", _F64), ("grad_norm", _F64), ("compute_seconds", _F64),
    ("error", _I32), ("message", _TEXT), ("reason", _TEXT), ("code", _I32),
    ("at_boundary", _BOOL), ("make_nccl_id", _BOOL), ("rank", _U32), ("world", _U32),
    ("peers", _PEERS), ("sync_root", _U32), ("backend", _BACKEND), ("timeout_ms", _U32),
    ("nccl_id", _NCCL), ("offset", _U64), ("length", _U64), ("total", _U64),
    ("hash", _U64), ("stall_us", _U64), ("wait_us", _U64), ("skipped", _U64),
    ("status", _I32), ("name", _TEXT), ("fallbacks", _U32), ("ckpt_interval", _U32),
    ("ckpt_busy", _BUSY), ("ckpt_dir", _PATH), ("resume", _PATH), ("ckpt_verify", _VERIFY),
    # ---- extensions (docs/pytorch.md, "Agent-side changes required") ----
    ("store", _ADDR), ("torch_backend", _TBACKEND), ("layout", _LAYOUT), ("header_bytes", _U64),
    # ---- the agent's keys added since (ea_ipc.h) ----
    ("peer", _U32),
)
_KIND = dict(KEYS)
_ORDER = {k: i for i, (k, _) in enumerate(KEYS)}

#: The extension keys and the types that carry them.
EXTENSION_KEYS: Dict[str, Tuple[str, ...]] = {
    "commit": ("store", "torch_backend"),
    "ckpt_staged": ("layout", "header_bytes"),
}

#: type → (required keys, optional keys): ``types[]`` of train/ipc.c, with the
#: extension keys appended to the optional ones.
TYPES: Dict[str, Tuple[Tuple[str, ...], Tuple[str, ...]]] = {
    # worker → agent
    "hello": (("pid", "local_rank", "comm_addr", "next_step", "digest"), ()),
    "ready": (("gen", "comm_addr", "next_step", "digest"), ("nccl_id",)),
    "step": (("gen", "step", "loss", "digest", "samples", "seconds"),
             ("grad_norm", "compute_seconds")),
    "failed": (("gen", "error", "message", "next_step"), ("peer",)),
    "aborted": (("gen", "next_step"), ()),
    "done": (("gen", "next_step", "digest"), ()),
    "exiting": (("reason", "code"), ()),
    "ckpt_staged": (("gen", "step", "rank", "world", "offset", "length", "total", "hash",
                     "stall_us", "wait_us", "skipped"), ("layout", "header_bytes")),
    "ckpt_skipped": (("gen", "step", "rank", "world", "reason", "skipped"), ()),
    "ckpt_loaded": (("gen", "step", "name", "digest", "fallbacks", "message", "seconds"), ()),
    # agent → worker
    "prepare": (("gen", "at_boundary"), ("make_nccl_id",)),
    "commit": (("gen", "rank", "world", "peers", "sync_root", "backend", "timeout_ms"),
               ("nccl_id", "ckpt_interval", "ckpt_busy", "ckpt_dir", "resume", "ckpt_verify",
                "store", "torch_backend")),
    "pause": (("reason",), ()),
    "stop": ((), ()),
    "ckpt_done": (("gen", "step", "status", "message"), ()),
    "ckpt_at": (("gen", "step"), ()),
}
WORKER_TO_AGENT = frozenset({"hello", "ready", "step", "failed", "aborted", "done", "exiting",
                             "ckpt_staged", "ckpt_skipped", "ckpt_loaded"})
AGENT_TO_WORKER = frozenset({"prepare", "commit", "pause", "stop", "ckpt_done", "ckpt_at"})

_CHOICES = {
    _BACKEND: (16, ("tcp", "nccl"), 'expected "tcp" or "nccl"'),
    _BUSY: (8, ("wait", "skip"), 'expected "wait" or "skip"'),
    _VERIFY: (8, ("full", "size"), 'expected "full" or "size"'),
    _TBACKEND: (16, ("gloo", "nccl"), 'expected "gloo" or "nccl"'),
    _LAYOUT: (16, (LAYOUT_EA_STATE_1,), 'expected "%s"' % LAYOUT_EA_STATE_1),
}
_CAP = {_ADDR: ADDR_MAX, _TEXT: TEXT_MAX, _PATH: PATH_MAX}


def _blen(s: str) -> int:
    return len(s.encode("utf-8", "surrogateescape"))


# ---- validation (the agent's validate(), rule for rule) ------------------------


def _validate(t: str, m: Mapping[str, Any], keys: frozenset) -> None:
    """The rules beyond types that the agent's decoder and encoder enforce,
    in the agent's order.  ``m`` holds defaults for absent optional keys."""

    def bad(text: str) -> ProtocolError:
        return ProtocolError(text)

    if "comm_addr" in keys and not 0 < _blen(m["comm_addr"]) < ADDR_MAX:
        raise bad("%s.comm_addr: expected a non-empty address < %d bytes" % (t, ADDR_MAX))
    for k in ("message", "reason"):
        if k in keys and _blen(m[k]) >= TEXT_MAX:
            raise bad("%s.%s: longer than %d bytes" % (t, k, TEXT_MAX - 1))
    if "error" in keys and m["error"] >= 0:
        raise bad("%s.error: expected a negative errno, got %d" % (t, m["error"]))
    if "status" in keys and m["status"] > 0:
        raise bad("%s.status: expected 0 or a negative errno, got %d" % (t, m["status"]))
    if "name" in keys and _blen(m["name"]) >= TEXT_MAX:
        raise bad("%s.name: longer than %d bytes" % (t, TEXT_MAX - 1))
    if t in ("ckpt_staged", "ckpt_skipped") and (m["world"] < 1 or m["rank"] >= m["world"]):
        raise bad("%s.rank: %d not below world %d" % (t, m["rank"], m["world"]))
    if t == "ckpt_staged" and (m["offset"] > m["total"] or m["length"] > m["total"] - m["offset"]):
        raise bad("ckpt_staged.length: [%d, +%d) leaves the %d-byte state"
                  % (m["offset"], m["length"], m["total"]))
    if t == "commit":
        world, peers = m["world"], m["peers"]
        if world < 1:
            raise bad("commit.world: must be >= 1")
        if m["rank"] >= world:
            raise bad("commit.rank: %d not below world %d" % (m["rank"], world))
        if m["sync_root"] >= world:
            raise bad("commit.sync_root: %d not below world %d" % (m["sync_root"], world))
        if len(peers) > MAX_PEERS:
            raise bad("commit.peers: more than %d" % MAX_PEERS)
        if (len(peers) != world) if m["backend"] == "tcp" else (len(peers) not in (0, world)):
            raise bad("commit.peers: %d addresses for world %d" % (len(peers), world))
        for i, p in enumerate(peers):
            if not 0 < _blen(p) < ADDR_MAX:
                raise bad("commit.peers[%d]: expected a non-empty address < %d bytes" % (i, ADDR_MAX))
        if m["backend"] == "nccl" and "nccl_id" not in keys:
            raise bad("commit.nccl_id: required by backend nccl")
        for k in ("ckpt_dir", "resume"):
            if _blen(m[k]) >= PATH_MAX:
                raise bad("commit.%s: longer than %d bytes" % (k, PATH_MAX - 1))
        if m["ckpt_busy"] == "skip" and not m["ckpt_interval"]:
            raise bad('commit.ckpt_busy: "skip" without ckpt_interval')
        if m["ckpt_verify"] == "size" and not m["resume"]:
            raise bad("commit.ckpt_verify: without resume")
        if m["resume"] and not m["ckpt_dir"]:
            raise bad("commit.resume: needs ckpt_dir")
        # extension
        if "store" in keys and not 0 < _blen(m["store"]) < ADDR_MAX:
            raise bad("commit.store: expected a non-empty address < %d bytes" % ADDR_MAX)
    if t == "ckpt_staged" and ("layout" in keys) != ("header_bytes" in keys):
        raise bad("ckpt_staged.%s: required with %s" % (
            ("header_bytes", "layout") if "layout" in keys else ("layout", "header_bytes")))
    if t == "ckpt_staged" and "header_bytes" in keys and m["header_bytes"] > m["total"]:
        raise bad("ckpt_staged.header_bytes: %d beyond the %d-byte state"
                  % (m["header_bytes"], m["total"]))


_DEFAULTS = {"nccl_id": b"", "ckpt_interval": 0, "ckpt_busy": "wait", "ckpt_dir": "",
             "resume": "", "ckpt_verify": "full", "make_nccl_id": False}


def _full(m: Mapping[str, Any]) -> Dict[str, Any]:
    d = dict(_DEFAULTS)
    d.update(m)
    return d


# ---- encoding ------------------------------------------------------------------


def _check_value(t: str, k: str, v: Any) -> Any:
    """Type-check one value for the encoder; returns it as it will be packed."""
    kind = _KIND[k]
    field = "%s.%s" % (t, k)
    if kind in (_U64, _U32):
        if type(v) is not int or v < 0:
            raise ProtocolError("%s: expected uint" % field)
        if v > (_U64_MAX if kind == _U64 else _U32_MAX):
            raise ProtocolError("%s: out of range" % field)
        return v
    if kind == _I32:
        if type(v) is not int:
            raise ProtocolError("%s: expected int" % field)
        if not _I32_MIN <= v <= _I32_MAX:
            raise ProtocolError("%s: out of range" % field)
        return v
    if kind == _F64:
        if type(v) not in (int, float):
            raise ProtocolError("%s: expected float" % field)
        return float(v)  # the agent packs a double
    if kind == _BOOL:
        if type(v) is not bool:
            raise ProtocolError("%s: expected bool" % field)
        return v
    if kind in (_ADDR, _TEXT, _PATH):
        if not isinstance(v, str):
            raise ProtocolError("%s: expected str" % field)
        if "\0" in v:
            raise ProtocolError("%s: contains a NUL byte" % field)
        return v
    if kind == _PEERS:
        if not isinstance(v, (list, tuple)):
            raise ProtocolError("%s: expected array" % field)
        for i, p in enumerate(v):
            if not isinstance(p, str):
                raise ProtocolError("%s[%d]: expected str" % (field, i))
            if "\0" in p:
                raise ProtocolError("%s[%d]: contains a NUL byte" % (field, i))
        return list(v)
    if kind == _NCCL:
        if not isinstance(v, (bytes, bytearray, memoryview)):
            raise ProtocolError("%s: expected bin" % field)
        if len(v) != NCCL_ID_BYTES:
            raise ProtocolError("%s: expected %d bytes" % (field, NCCL_ID_BYTES))
        return bytes(v)
    cap, choices, why = _CHOICES[kind]
    if not isinstance(v, str):
        raise ProtocolError("%s: expected str" % field)
    if v not in choices:
        raise ProtocolError("%s: %s" % (field, why))
    return v


def _normalise(t: str, msg: Mapping[str, Any]) -> Dict[str, Any]:
    """Drop the optional keys the agent's encoder would not write (a false
    make_nccl_id, a zero ckpt_interval with its busy policy, an empty
    ckpt_dir or resume with its verify mode, None values) and add the ones it
    writes alongside (ckpt_busy with ckpt_interval, ckpt_verify with resume),
    so that equal messages encode to equal bytes on both sides."""
    m = {k: v for k, v in msg.items() if v is not None}
    if t == "prepare" and m.get("make_nccl_id") is False:
        del m["make_nccl_id"]
    if t == "commit":
        if m.get("ckpt_interval", 0) == 0:
            m.pop("ckpt_interval", None)
            if m.get("ckpt_busy") == "wait":
                del m["ckpt_busy"]
        elif "ckpt_busy" not in m:
            m["ckpt_busy"] = "wait"
        if m.get("ckpt_dir") == "":
            del m["ckpt_dir"]
        if m.get("resume", "") == "":
            m.pop("resume", None)
            if m.get("ckpt_verify") == "full":
                del m["ckpt_verify"]
        elif "ckpt_verify" not in m:
            m["ckpt_verify"] = "full"
    return m


_packer_opts = dict(use_bin_type=True, unicode_errors="surrogateescape")


def encode(msg: Mapping[str, Any]) -> bytes:
    """Encode one message to the bytes ``ea_ipc_encode`` writes for it.

    Raises :class:`ProtocolError` naming the field for an unknown type, a
    missing required key, a key the type does not have, a value of the wrong
    type or range, a message the agent's decoder would reject, or one larger
    than :data:`MAX_MSG`.
    """
    t = msg.get("type")
    if not isinstance(t, str) or t not in TYPES:
        raise ProtocolError("type: unknown message type %r" % (t,))
    req, opt = TYPES[t]
    body = {k: v for k, v in msg.items() if k != "type"}
    for k in body:
        if k not in req and k not in opt:
            raise ProtocolError("%s.%s: not a key of %s" % (t, k, t))
    for k in req:
        if k not in body or body[k] is None:
            raise ProtocolError("%s.%s: missing" % (t, k))
    m = _normalise(t, {k: _check_value(t, k, v) for k, v in body.items() if v is not None})
    keys = frozenset(m)
    _validate(t, _full(m), keys)
    packed: Dict[str, Any] = {"type": t}
    for k in sorted(m, key=_ORDER.__getitem__):
        packed[k] = m[k]
    out = msgpack.packb(packed, **_packer_opts)
    if len(out) > MAX_MSG:
        raise ProtocolError("%s: does not fit in %d bytes" % (t, MAX_MSG))
    return out


# ---- decoding ------------------------------------------------------------------


def _cstr(r: mpr.Reader, cap: int) -> bytes:
    """``read_cstr``: a str of at most cap-1 bytes with no NUL."""
    save = r.pos
    try:
        b = r.str(cap - 1)
    except mpr.MprError as e:
        if e.code == mpr.RANGE:
            raise _Why("too long")
        raise _Why("expected str" if e.code == mpr.TYPE else mpr.strerror(e.code))
    if b"\0" in b:
        r.pos = save
        raise _Why("contains a NUL byte")
    return b


class _Why(Exception):
    def __init__(self, why: str, index: Optional[int] = None) -> None:
        super().__init__(why)
        self.why = why
        self.index = index


def _mp(fn, *a):
    try:
        return fn(*a)
    except mpr.MprError as e:
        raise _Why(_EXPECT.get(fn.__name__, "invalid") if e.code == mpr.TYPE else mpr.strerror(e.code))


_EXPECT = {"uint": "expected uint", "int": "expected int", "float": "expected float",
           "bool": "expected bool", "array": "expected array"}


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def _read_value(r: mpr.Reader, k: str) -> Any:
    kind = _KIND[k]
    if kind == _U64:
        return _mp(r.uint, _U64_MAX)
    if kind == _U32:
        return _mp(r.uint, _U32_MAX)
    if kind == _I32:
        return _mp(r.int, _I32_MIN, _I32_MAX)
    if kind == _F64:
        return _mp(r.float)
    if kind == _BOOL:
        return _mp(r.bool)
    if kind in _CAP:
        return _text(_cstr(r, _CAP[kind]))
    if kind == _PEERS:
        n = _mp(r.array)
        if n > MAX_PEERS:
            raise _Why("too many addresses")
        if n > r.left():
            raise _Why("truncated")
        out: List[str] = []
        for i in range(n):
            try:
                out.append(_text(_cstr(r, ADDR_MAX)))
            except _Why as w:
                raise _Why(w.why, i)
        return out
    if kind == _NCCL:
        try:
            b = r.bin(NCCL_ID_BYTES)
        except mpr.MprError as e:
            raise _Why({mpr.TYPE: "expected bin", mpr.RANGE: "expected 128 bytes"}.get(
                e.code, mpr.strerror(e.code)))
        if len(b) != NCCL_ID_BYTES:
            raise _Why("expected 128 bytes")
        return b
    cap, choices, why = _CHOICES[kind]
    s = _text(_cstr(r, cap))
    if s not in choices:
        raise _Why(why)
    return s


def decode(buf: bytes | bytearray | memoryview) -> Dict[str, Any]:
    """Decode one packet into a message dict holding ``type``, the type's
    required keys and whichever optional keys are present (unknown keys are
    skipped).

    Raises :class:`ProtocolError` with the agent decoder's text for anything
    ``ea_ipc_decode`` rejects: not a map, a non-str key, a malformed value
    anywhere, a missing, unknown or duplicate ``type``, trailing bytes, a
    duplicate, missing, mistyped or out-of-range key, or a rule of the type
    (``commit.rank: 3 not below world 2``).
    """
    data = bytes(buf)
    r = mpr.Reader(data)
    try:
        n = r.map()
    except mpr.MprError as e:
        raise ProtocolError("message: expected a map (%s)" % mpr.strerror(e.code))
    body = r.pos
    t: Optional[str] = None
    for i in range(n):
        try:
            key = r.str(MAX_MSG)
        except mpr.MprError as e:
            raise ProtocolError("message: key %d: %s" % (
                i, "expected str" if e.code == mpr.TYPE else mpr.strerror(e.code)))
        if key == b"type":
            if t is not None:
                raise ProtocolError("type: duplicate key")
            try:
                tn = _text(_cstr(r, 16))
            except _Why as w:
                raise ProtocolError("type: %s" % w.why)
            if tn not in TYPES:
                raise ProtocolError('type: unknown message type "%s"' % tn)
            t = tn
        else:
            try:
                r.skip(SKIP_DEPTH_MAX)
            except mpr.MprError as e:
                raise ProtocolError('message: value of "%s": %s' % (_text(key), mpr.strerror(e.code)))
    if t is None:
        raise ProtocolError("type: missing")
    if r.pos != r.end:
        raise ProtocolError("%s: %d trailing bytes after the map" % (t, r.left()))

    req, opt = TYPES[t]
    mine = set(req) | set(opt)
    m: Dict[str, Any] = {}
    r.pos = body
    for _ in range(n):
        key = _text(r.str(MAX_MSG))
        if key == "type" or key not in mine:
            r.skip(SKIP_DEPTH_MAX)
            continue
        if key in m:
            raise ProtocolError("%s.%s: duplicate key" % (t, key))
        try:
            m[key] = _read_value(r, key)
        except _Why as w:
            if w.index is not None:
                raise ProtocolError("%s.%s[%d]: %s" % (t, key, w.index, w.why))
            raise ProtocolError("%s.%s: %s" % (t, key, w.why))
    missing = [k for k in req if k not in m]
    if missing:
        first = min(missing, key=_ORDER.__getitem__)
        raise ProtocolError("%s.%s: missing" % (t, first))
    _validate(t, _full(m), frozenset(m))
    out: Dict[str, Any] = {"type": t}
    out.update(m)
    return out


def is_finite(x: float) -> bool:
    """True for a loss the agent does not alert on."""
    return math.isfinite(x)
