"""XXH3-64 (seed 0, default secret): the hash the agent uses for parameter
digests, shard hashes and manifest trailers.

The agent checks that a staged shard's bytes hash to the ``hash`` of its
``ckpt_staged``, so the worker must compute exactly what the agent's
libxxhash ``XXH3_64bits`` does.  That is PyPI's ``xxhash`` package (a
declared dependency, python/pyproject.toml), which bundles the same C library
— ``tests/python/test_layout.py`` checks it against the agent's
``libxxhash.so.0`` where that is installed.  The package's modules call
``xxhash`` directly; this module keeps the one-shot helper that tests and
programs import.  Streaming: ``xxhash.xxh3_64()``, ``update()``,
``intdigest()``.
"""
from __future__ import annotations

import xxhash

__all__ = ["xxh3_64"]


def xxh3_64(data) -> int:
    """XXH3-64 of a bytes-like object (seed 0): the value ``xxhsum -H3`` prints."""
    return xxhash.xxh3_64_intdigest(data)
