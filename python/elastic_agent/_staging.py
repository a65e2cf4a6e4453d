"""The checkpoint staging buffer: one memfd shared with the agent.

Exactly the built-in worker's scheme (train/worker.c, docs/checkpoints.md):
the worker owns one memfd, created on first use, sized to its shard at a
generation change (``MAP_POPULATE``: page faults are not part of a stall),
and passes it with every ckpt_staged.  After step ``s`` it copies its byte
range ``[⌊rT/W⌋, ⌊(r+1)T/W⌋)`` of the flat state into it and hashes it
(XXH3-64, which the agent checks against what it wrote); that copy is the
only stall.  The memfd is not touched again until the agent answers
ckpt_done for that step.  It outlives this process while the agent holds
its copy, so a shard being written survives a worker crash.
"""
from __future__ import annotations

import mmap
import os
import time
from typing import Optional, Tuple

import xxhash

from .layout import FlatState

__all__ = ["Stager"]


class Stager:
    """The memfd and its mapping.  Not thread-safe: the training thread only."""

    def __init__(self) -> None:
        self.fd = -1
        self._map: Optional[mmap.mmap] = None
        self.size = 0

    def ensure(self, n: int) -> None:
        """Size the memfd to ``n`` bytes and map it.  Call only with no shard
        in flight (shrinking a file the agent still maps would fault its
        reads).  Raises OSError (ENOMEM, EMFILE…) on failure."""
        if self.fd < 0:
            self.fd = os.memfd_create("ea-ckpt-staging", os.MFD_CLOEXEC)
        if self.size == n and (self._map is not None or n == 0):
            return
        if self._map is not None:
            self._map.close()
            self._map = None
        self.size = 0
        os.ftruncate(self.fd, n)
        if n:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            self._map = mmap.mmap(self.fd, n, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.size = n

    def stage(self, flat: FlatState, lo: int, hi: int) -> Tuple[int, float]:
        """Copy bytes [lo, hi) of ``flat`` to offset 0 and hash them; returns
        (XXH3-64, seconds the copy and hash took).  The memfd is resized if
        it is not hi-lo bytes."""
        self.ensure(hi - lo)
        t0 = time.monotonic()
        if self._map is None:
            return xxhash.xxh3_64_intdigest(b""), time.monotonic() - t0
        flat.copy_range(self._map, lo, hi)
        h = xxhash.xxh3_64_intdigest(self._map)
        return h, time.monotonic() - t0

    def read(self) -> bytes:
        """What is staged (for tests)."""
        return bytes(self._map) if self._map is not None else b""

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.size = 0
