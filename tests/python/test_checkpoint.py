"""Reading checkpoints back (the cold start): the MANIFEST, the resume
rules of ea_ckpt_resolve, and — when bin/elastic-agent is built — the agent's
own verifier and ``ckpt show`` on a checkpoint of a library state."""
from __future__ import annotations

import os
import subprocess

import pytest

from ckpt_util import tensor_lines, write_checkpoint
from conftest import ROOT
from elastic_agent import ObjectState
from elastic_agent.checkpoint import list_checkpoints, parse_manifest, read_state, resolve
from elastic_agent.errors import CheckpointError

AGENT = os.path.join(ROOT, "bin", "elastic-agent")


def _state(step=7, n=5000):
    s = ObjectState(blob=bytearray(bytes(range(256)) * (n // 256)), epoch=2)
    s.step = step
    return bytes(s.flat().to_bytes())


def test_manifest_round_trip_and_damage(tmp_path):
    st = _state()
    p = write_checkpoint(str(tmp_path), 7, 2, st, world=3, tensors=tensor_lines(st))
    text = open(os.path.join(p, "MANIFEST"), "rb").read()
    m = parse_manifest(text, "MANIFEST")
    assert (m.step, m.generation, m.world_size, m.total_bytes) == (7, 2, 3, len(st))
    assert [s.file for s in m.shards] == ["shard-%d-of-3.bin" % r for r in range(3)]
    assert m.tensors[0].startswith("extras.blob u8 4864 ")
    with pytest.raises(CheckpointError, match="damaged"):
        parse_manifest(text.replace(b"step 7", b"step 8"), "MANIFEST")
    r = resolve(str(tmp_path), "latest")
    assert r.name == "step-7.gen-2" and read_state(r) == st


def test_resume_rules(tmp_path):
    d = str(tmp_path)
    assert resolve(d, "latest") is None and resolve(d + "/nope", "latest") is None
    a, b = _state(10), _state(20)
    write_checkpoint(d, 10, 1, a, world=2)
    write_checkpoint(d, 20, 1, b, world=2)
    write_checkpoint(d, 15, 2, a, world=1)       # a newer generation restarted from 10 …
    os.makedirs(os.path.join(d, "step-30.gen-2"))  # … and a partial one (no MANIFEST)
    es = list_checkpoints(d)
    assert [(e.name, e.superseded) for e in es] == [("step-20.gen-1", True), ("step-15.gen-2", False),
                                                    ("step-10.gen-1", False)]
    r = resolve(d, "latest")
    assert r.name == "step-15.gen-2" and r.fallbacks == 1 and "superseded" in r.why
    assert resolve(d, "10").name == "step-10.gen-1"
    assert resolve(d, "step-20.gen-1").name == "step-20.gen-1"  # named: superseded or not
    assert resolve(d, os.path.join(d, "step-10.gen-1") + "/").name == "step-10.gen-1"
    with pytest.raises(CheckpointError, match="no complete checkpoint of step 11"):
        resolve(d, "11")
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        resolve(d, "step-30.gen-2")
    # damage: latest falls back, a named one is an error; size mode sees only lengths
    with open(os.path.join(d, "step-15.gen-2", "shard-0-of-1.bin"), "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01")
    r = resolve(d, "latest")
    assert r.name == "step-10.gen-1" and r.fallbacks == 2
    assert r.why.startswith("step-20.gen-1: superseded")  # the first reason is kept
    assert resolve(d, "latest", full=False).name == "step-15.gen-2"
    with pytest.raises(CheckpointError, match="content does not match its XXH3"):
        resolve(d, "step-15.gen-2")
    os.truncate(os.path.join(d, "step-10.gen-1", "shard-1-of-2.bin"), 10)
    with pytest.raises(CheckpointError, match=r"shard 1: .*: 10 bytes, the manifest says"):
        resolve(d, "10", full=False)


@pytest.mark.skipif(not os.access(AGENT, os.X_OK), reason="bin/elastic-agent not built (make)")
def test_the_agent_verifies_and_shows_a_library_checkpoint(tmp_path):
    """What ckpt_util writes is what the agent writes: its verifier accepts it,
    and ``ckpt show`` lists the tensor table taken from the state's header
    (what the agent-side change makes the controller do)."""
    st = _state()
    write_checkpoint(str(tmp_path), 7, 2, st, world=3, tensors=tensor_lines(st))
    v = subprocess.run([AGENT, "ckpt", "verify", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert v.returncode == 0, v.stdout + v.stderr
    show = subprocess.run([AGENT, "ckpt", "show", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert show.returncode == 0, show.stderr
    assert "extras.blob" in show.stdout and "meta" in show.stdout
    # and the agent's verifier sees the damage this package's reader sees
    with open(os.path.join(str(tmp_path), "step-7.gen-2", "shard-2-of-3.bin"), "r+b") as f:
        f.write(b"\xff\xff")
    v = subprocess.run([AGENT, "ckpt", "verify", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert v.returncode == 1 and "shard 2" in v.stdout + v.stderr
    assert resolve(str(tmp_path), "latest") is None
    with pytest.raises(CheckpointError, match="shard 2"):
        resolve(str(tmp_path), "7")
