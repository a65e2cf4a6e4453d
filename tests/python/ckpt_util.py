"""Writing a checkpoint exactly as the agents do (docs/checkpoints.md), for
the resume tests: shard files that are plain byte ranges and a MANIFEST in the
agent's line format (block hashes and the ``end`` hash included), so that
``elastic-agent ckpt verify`` accepts it — test_checkpoint checks that when
the binary is built."""
from __future__ import annotations

import os
from typing import List, Optional, Sequence

from elastic_agent.layout import parse_header, split_range
from elastic_agent.xxh3 import xxh3_64

MIN_BLOCK = 1 << 20  # EA_CKPT_MIN_BLOCK
MAX_BLOCKS = 64


def block_size(length: int) -> int:
    want = (length + MAX_BLOCKS - 1) // MAX_BLOCKS
    bs = MIN_BLOCK
    while bs < want:
        bs <<= 1
    return bs


def tensor_lines(state: bytes) -> List[str]:
    """The MANIFEST tensor lines an agent derives from an ea-state-1 header."""
    specs, _, _ = parse_header(state)
    return [s.line().rstrip("\n") for s in specs]


def write_checkpoint(ckpt_dir: str, step: int, gen: int, state: bytes, world: int,
                     tensors: Optional[Sequence[str]] = None, latest: bool = True) -> str:
    """DIR/step-S.gen-G with W shards of ``state`` and its MANIFEST; returns the
    step directory.  ``tensors`` defaults to the opaque "state u8" line the
    agent writes today for a user's worker."""
    name = "step-%d.gen-%d" % (step, gen)
    path = os.path.join(ckpt_dir, name)
    os.makedirs(path, exist_ok=True)
    total = len(state)
    lines = ["# elastic-agent checkpoint manifest; see docs/checkpoints.md", "format 1",
             "step %d" % step, "generation %d" % gen, "world_size %d" % world,
             "total_bytes %d" % total, "config_hash %016x" % 0x5A17C0FFEE15900D,
             "agent_version 0.1.0", "created 2026-11-30T02:00:19Z", "hash xxh3-64"]
    tl = list(tensors) if tensors is not None else ["tensor state u8 %d 0 %d" % (total, total)]
    lines.append("tensors %d" % len(tl))
    lines += tl
    lines.append("shards %d" % world)
    for r in range(world):
        lo, hi = split_range(total, world, r)
        data = state[lo:hi]
        f = "shard-%d-of-%d.bin" % (r, world)
        with open(os.path.join(path, f), "wb") as fh:
            fh.write(data)
        bs = block_size(len(data))
        blocks = [xxh3_64(data[i:i + bs]) for i in range(0, len(data), bs)]
        lines.append(" ".join(["shard", str(r), f, str(lo), str(hi - lo), "%016x" % xxh3_64(data),
                               str(bs), str(len(blocks))] + ["%016x" % b for b in blocks]))
    body = ("\n".join(lines) + "\n").encode()
    with open(os.path.join(path, "MANIFEST"), "wb") as fh:
        fh.write(body + b"end %016x\n" % xxh3_64(body))
    if latest:
        with open(os.path.join(ckpt_dir, "LATEST"), "w") as fh:
            fh.write(name + "\n")
    return path
