"""Reading the agent's checkpoints back: the cold start of a library program.

The agents write checkpoints (docs/checkpoints.md): ``DIR/step-S.gen-G/``
with ``shard-R-of-W.bin`` files that are plain byte ranges of the flat state,
and a ``MANIFEST`` whose presence makes the checkpoint exist.  When a COMMIT
carries ``resume`` (a cold start), the sync root reads one back here and the
state sync hands it to every rank; any world size reads any checkpoint.

The choice follows ``ea_ckpt_resolve`` / ``ea_ckpt_find_resume`` rule for
rule: ``latest`` takes the newest complete (MANIFEST parses, matches its
directory) non-superseded checkpoint, by (step, generation), that verifies
(``full``: every shard's XXH3 re-computed; ``size``: lengths only), passing
over damaged ones (counted, the first reason kept); a step number takes that
step's newest generation; ``step-S.gen-G`` that directory; anything with a
``/`` is a path to a step directory.  An explicitly named checkpoint that
fails verification is an error, not a fallback, and so is one whose state
does not fit the program (another model: no fallback, as for the built-in
trainer).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import xxhash

from .errors import CheckpointError

__all__ = ["Manifest", "Resolved", "parse_manifest", "list_checkpoints", "resolve", "read_state"]

_DIR_RE = re.compile(r"^step-(0|[1-9][0-9]*)\.gen-(0|[1-9][0-9]*)$")
_MANIFEST_MAX = 256 << 20  # EA_CKPT_MANIFEST_MAX


@dataclass
class Shard:
    rank: int
    file: str
    offset: int
    length: int
    hash: int


@dataclass
class Manifest:
    step: int
    generation: int
    world_size: int
    total_bytes: int
    shards: List[Shard]
    tensors: List[str] = field(default_factory=list)


def parse_manifest(text: bytes, where: str) -> Manifest:
    """Parse a MANIFEST (the fields resume needs; the agent's parser is the
    strict one).  Raises CheckpointError "WHERE: line N: field: problem"."""
    end = text.rfind(b"\nend ")
    if end < 0:
        raise CheckpointError("%s: no \"end\" line" % where)
    body, trailer = text[:end + 1], text[end + 1:].decode("ascii", "replace").strip()
    try:
        want = int(trailer.split()[1], 16)
    except (IndexError, ValueError):
        raise CheckpointError("%s: \"end\": expected 16 hex digits" % where)
    if xxhash.xxh3_64_intdigest(body) != want:
        raise CheckpointError("%s: damaged (its \"end\" hash does not match)" % where)
    kv: Dict[str, str] = {}
    tensors: List[str] = []
    shards: List[Shard] = []
    for n, raw in enumerate(body.decode("ascii", "replace").split("\n"), 1):
        if not raw or raw.startswith("#"):
            continue
        key, _, rest = raw.partition(" ")
        if key == "tensor":
            tensors.append(rest)
        elif key == "shard":
            f = rest.split()
            try:
                shards.append(Shard(int(f[0]), f[1], int(f[2]), int(f[3]), int(f[4], 16)))
            except (IndexError, ValueError):
                raise CheckpointError("%s: line %d: shard: malformed" % (where, n))
            if not re.fullmatch(r"shard-%d-of-[0-9]+\.bin" % shards[-1].rank, f[1]):
                raise CheckpointError("%s: line %d: shard file: %r" % (where, n, f[1]))
        else:
            kv[key] = rest
    try:
        m = Manifest(int(kv["step"]), int(kv["generation"]), int(kv["world_size"]),
                     int(kv["total_bytes"]), shards, tensors)
    except (KeyError, ValueError) as e:
        raise CheckpointError("%s: %s: missing or not a number" % (where, e))
    if len(shards) != m.world_size:
        raise CheckpointError("%s: %d shard lines for world_size %d" % (where, len(shards), m.world_size))
    pos = 0
    for i, s in enumerate(shards):
        if s.rank != i or s.offset != pos:
            raise CheckpointError("%s: shard %d: does not tile the state" % (where, i))
        pos += s.length
    if pos != m.total_bytes:
        raise CheckpointError("%s: shards hold %d bytes, total_bytes is %d" % (where, pos, m.total_bytes))
    return m


@dataclass
class Entry:
    name: str
    step: int
    generation: int
    path: str
    manifest: Optional[Manifest] = None
    error: str = ""
    superseded: bool = False


def _load_manifest(path: str, name: str) -> Tuple[Optional[Manifest], str]:
    mp = os.path.join(path, "MANIFEST")
    try:
        with open(mp, "rb") as f:
            text = f.read(_MANIFEST_MAX + 1)
    except OSError as e:
        return None, "%s: %s" % (mp, e.strerror)
    if len(text) > _MANIFEST_MAX:
        return None, "%s: larger than %d bytes" % (mp, _MANIFEST_MAX)
    try:
        return parse_manifest(text, mp), ""
    except CheckpointError as e:
        return None, str(e)


def list_checkpoints(ckpt_dir: str) -> List[Entry]:
    """Every step directory with a MANIFEST, newest first by (step,
    generation), with ``superseded`` marked (a complete checkpoint of a newer
    generation has a lower step).  Raises CheckpointError if DIR cannot be
    listed (FileNotFoundError passes through for a missing DIR)."""
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise CheckpointError("%s: %s" % (ckpt_dir, e.strerror))
    out: List[Entry] = []
    for name in names:
        mt = _DIR_RE.match(name)
        path = os.path.join(ckpt_dir, name)
        if not mt or not os.path.isdir(path) or os.path.islink(path):
            continue
        if not os.path.exists(os.path.join(path, "MANIFEST")):
            continue  # not a checkpoint
        e = Entry(name, int(mt.group(1)), int(mt.group(2)), path)
        e.manifest, e.error = _load_manifest(path, name)
        if e.manifest and (e.manifest.step, e.manifest.generation) != (e.step, e.generation):
            e.error = "MANIFEST is for step %d generation %d, not this directory" % (
                e.manifest.step, e.manifest.generation)
            e.manifest = None
        out.append(e)
    for e in out:
        if e.manifest:
            e.superseded = any(o.manifest and o.generation > e.generation and o.step < e.step for o in out)
    out.sort(key=lambda e: (e.step, e.generation), reverse=True)
    return out


def verify(path: str, m: Manifest, full: bool) -> None:
    """Check every shard file's length (and, with ``full``, its XXH3).
    Raises CheckpointError naming the file and what is wrong."""
    for s in m.shards:
        fp = os.path.join(path, s.file)
        try:
            size = os.stat(fp).st_size
        except OSError as e:
            raise CheckpointError("shard %d: %s: %s" % (s.rank, fp, e.strerror))
        if size != s.length:
            raise CheckpointError("shard %d: %s: %d bytes, the manifest says %d" % (s.rank, fp, size, s.length))
        if full:
            h = xxhash.xxh3_64()
            with open(fp, "rb") as f:
                while True:
                    b = f.read(8 << 20)
                    if not b:
                        break
                    h.update(b)
            if h.intdigest() != s.hash:
                raise CheckpointError("shard %d: %s: content does not match its XXH3" % (s.rank, fp))


@dataclass
class Resolved:
    """The checkpoint a resume spec chose."""
    name: str
    path: str
    manifest: Manifest
    fallbacks: int = 0  # newer checkpoints passed over
    why: str = ""  # the first reason


def resolve(ckpt_dir: str, spec: str, full: bool = True) -> Optional[Resolved]:
    """The checkpoint ``spec`` names in ``ckpt_dir``, verified.

    ``latest`` with nothing usable in DIR (or no DIR) returns None: a fresh
    start.  Raises CheckpointError for an explicit spec that names nothing,
    or whose checkpoint fails verification."""
    if spec in ("", "latest"):
        try:
            entries = list_checkpoints(ckpt_dir)
        except FileNotFoundError:
            return None
        skipped: List[str] = []
        for e in entries:
            if e.manifest is None:
                skipped.append("%s: %s" % (e.name, e.error))
                continue
            if e.superseded:
                skipped.append("%s: superseded: a newer generation resumed from an earlier step" % e.name)
                continue
            try:
                verify(e.path, e.manifest, full)
            except CheckpointError as err:
                skipped.append("%s: %s" % (e.name, err))
                continue
            return Resolved(e.name, e.path, e.manifest, len(skipped), skipped[0] if skipped else "")
        return None
    if spec.isdigit():
        step = int(spec)
        try:
            entries = list_checkpoints(ckpt_dir)
        except FileNotFoundError:
            entries = []
        cand = [e for e in entries if e.step == step and e.manifest]
        if not cand:
            raise CheckpointError("--resume-from %s: no complete checkpoint of step %d in %s" % (spec, step, ckpt_dir))
        name, path = cand[0].name, cand[0].path
    elif "/" not in spec and _DIR_RE.match(spec):
        name, path = spec, os.path.join(ckpt_dir, spec)
    else:
        path = spec.rstrip("/") or "/"
        name = os.path.basename(path)
    m, err = _load_manifest(path, name)
    if m is None:
        raise CheckpointError("--resume-from %s: %s (not a complete checkpoint)" % (spec, err))
    try:
        verify(path, m, full)
    except CheckpointError as e:
        raise CheckpointError("--resume-from %s: %s" % (spec, e))
    return Resolved(name, path, m)


def read_state(r: Resolved) -> bytearray:
    """The whole flat state of a resolved checkpoint (its shards in rank
    order).  Raises CheckpointError naming the shard that cannot be read."""
    buf = bytearray(r.manifest.total_bytes)
    mv = memoryview(buf)
    for s in r.manifest.shards:
        fp = os.path.join(r.path, s.file)
        try:
            with open(fp, "rb", buffering=0) as f:
                got = 0
                while got < s.length:
                    n = f.readinto(mv[s.offset + got:s.offset + s.length])
                    if not n:
                        raise CheckpointError("shard %d: %s: ends after %d of %d bytes" % (s.rank, fp, got, s.length))
                    got += n
        except OSError as e:
            raise CheckpointError("shard %d: %s: %s" % (s.rank, fp, e.strerror))
    mv.release()
    return buf

