"""The worker protocol against the agent's own codec (train/ipc.c).

The vectors are tests/vectors/ipc.json, the one file that
tests/unit/test_ipc.c reads too: each message's fields and the bytes
``ea_ipc_encode`` writes for them, packets the decoders refuse with the
agent's exact error text, and packets they accept and re-encode.  Both
codecs must encode the fields to exactly those bytes and decode the bytes
back to the fields, so a change to either side's encoding fails one of the
two tests.
"""
from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import msgpack
import pytest

from elastic_agent import _protocol as protocol
from elastic_agent._connection import AgentConnection
from elastic_agent.errors import AgentGone, ProtocolError
from elastic_agent.xxh3 import xxh3_64

pk = lambda d: msgpack.packb(d, use_bin_type=True)  # noqa: E731

VECTORS_FILE = Path(__file__).resolve().parents[1] / "vectors" / "ipc.json"


def _value(v):
    """A field of the file as the codec's value: {"bin": HEX} is bytes,
    {"u64": "0x…"} an integer too large for JSON readers to keep exactly."""
    if isinstance(v, dict):
        (kind, x), = v.items()
        return bytes.fromhex(x) if kind == "bin" else int(x, 0)
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _fields(d):
    return {k: _value(v) for k, v in d.items()}


_FILE = json.loads(VECTORS_FILE.read_text())
#: (name, message, the agent's bytes as hex, the message the bytes decode to)
VECTORS = [(v["name"], _fields(v["fields"]), v["hex"], _fields(v.get("decoded", v["fields"])))
           for v in _FILE["messages"]]
#: (packet, the agent's error)
MALFORMED = [(bytes.fromhex(v["hex"]), v["error"]) for v in _FILE["malformed"]]
#: (packet, what the agent encodes the decoded message to, as hex)
ACCEPTED = [(bytes.fromhex(v["hex"]), v["reencoded"]) for v in _FILE["accepted"]]
BY_NAME = {name: msg for name, msg, _, _ in VECTORS}


@pytest.mark.parametrize("name,msg,hexbytes,decoded", VECTORS, ids=[v[0] for v in VECTORS])
def test_encode_is_the_agents_bytes(name, msg, hexbytes, decoded):
    assert protocol.encode(msg).hex() == hexbytes


@pytest.mark.parametrize("name,msg,hexbytes,decoded", VECTORS, ids=[v[0] for v in VECTORS])
def test_decode_of_the_agents_bytes(name, msg, hexbytes, decoded):
    assert protocol.decode(bytes.fromhex(hexbytes)) == decoded


def test_every_message_type_has_a_vector():
    assert {m["type"] for _, m, _, _ in VECTORS} == set(protocol.TYPES)
    assert protocol.WORKER_TO_AGENT | protocol.AGENT_TO_WORKER == set(protocol.TYPES)
    assert len(MALFORMED) > 60 and ACCEPTED


def test_largest_commit_fits_and_matches():
    """512 peers of the longest form: ≈ 49 KiB, one packet (EA_IPC_MAX_PEERS)."""
    m = dict(type="commit", gen=9, rank=0, world=512, peers=["a" * 95] * 512, sync_root=0,
             backend="tcp", timeout_ms=1, ckpt_dir="/d")
    b = protocol.encode(m)
    assert (len(b), xxh3_64(b)) == (49753, 0x933EFBFC67CCF82E)
    assert protocol.decode(b) == m


#: The vector "commit_3": the refusals below change one key of it.
COMMIT = BY_NAME["commit_3"]


@pytest.mark.parametrize("packet,error", MALFORMED, ids=[e for _, e in MALFORMED])
def test_malformed_packet_names_the_field(packet, error):
    with pytest.raises(ProtocolError) as ei:
        protocol.decode(packet)
    assert str(ei.value) == error


@pytest.mark.parametrize("packet,reencoded", ACCEPTED, ids=["accepted-%d" % i for i in range(len(ACCEPTED))])
def test_accepted_variants_reencode_as_the_agent_does(packet, reencoded):
    assert protocol.encode(protocol.decode(packet)).hex() == reencoded


def test_unknown_keys_are_skipped_both_ways():
    m = protocol.decode(pk({"future_key": {"a": [1, 2]}, "type": "aborted", "gen": 3, "next_step": 4}))
    assert m == {"type": "aborted", "gen": 3, "next_step": 4}
    # The package's extension keys round-trip (the vectors commit_store and
    # ckpt_staged_layout pin their bytes).
    ext = dict(COMMIT, store="h:1", torch_backend="gloo")
    assert protocol.decode(protocol.encode(ext)) == ext
    staged = dict(BY_NAME["ckpt_staged"], layout="ea-state-1", header_bytes=128)
    assert protocol.decode(protocol.encode(staged)) == staged


@pytest.mark.parametrize("msg,error", [
    ({"type": "hullo"}, "type: unknown message type 'hullo'"),
    ({"type": "stop", "gen": 1}, "stop.gen: not a key of stop"),
    ({"type": "aborted", "gen": 1}, "aborted.next_step: missing"),
    ({"type": "aborted", "gen": True, "next_step": 1}, "aborted.gen: expected uint"),
    ({"type": "aborted", "gen": 1 << 64, "next_step": 1}, "aborted.gen: out of range"),
    ({"type": "failed", "gen": 1, "error": 5, "message": "", "next_step": 0}, "failed.error: expected a negative errno, got 5"),
    ({"type": "exiting", "reason": "x" * 256, "code": 0}, "exiting.reason: longer than 255 bytes"),
    ({"type": "step", "gen": 1, "step": 1, "loss": "1", "digest": 0, "samples": 1, "seconds": 1.0}, "step.loss: expected float"),
    (dict(COMMIT, peers=["a:1", "b:2"]), "commit.peers: 2 addresses for world 3"),
    (dict(COMMIT, nccl_id=b"x"), "commit.nccl_id: expected 128 bytes"),
    ({"type": "ready", "gen": 1, "comm_addr": "a\0", "next_step": 0, "digest": 0}, "ready.comm_addr: contains a NUL byte"),
])
def test_encoder_refuses_what_the_agent_would(msg, error):
    with pytest.raises(ProtocolError) as ei:
        protocol.encode(msg)
    assert str(ei.value) == error


def test_optional_keys_follow_the_agents_encoder():
    """A false make_nccl_id, a zero interval and an empty resume are not written."""
    assert protocol.encode({"type": "prepare", "gen": 7, "at_boundary": False, "make_nccl_id": False}) == \
        protocol.encode({"type": "prepare", "gen": 7, "at_boundary": False})
    assert protocol.encode(dict(COMMIT, ckpt_interval=0, ckpt_busy="wait", resume="", ckpt_verify="full")) == \
        protocol.encode(COMMIT)
    assert protocol.encode({"type": "step", "gen": 1, "step": 1, "loss": 1, "digest": 0, "samples": 1,
                            "seconds": 1, "grad_norm": None}) == \
        protocol.encode({"type": "step", "gen": 1, "step": 1, "loss": 1.0, "digest": 0, "samples": 1, "seconds": 1.0})


# ---- the socket -------------------------------------------------------------------


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield AgentConnection(a), AgentConnection(b)
    a.close()
    b.close()


def test_one_message_per_packet_both_directions(pair):
    agent, worker = pair
    for _, msg, hx, _ in VECTORS:
        src, dst = (worker, agent) if msg["type"] in protocol.WORKER_TO_AGENT else (agent, worker)
        src.send(msg)
        raw, fds = dst.recv_raw(5)
        assert raw.hex() == hx and fds == []


def test_memfd_rides_with_ckpt_staged(pair):
    agent, worker = pair
    fd = os.memfd_create("t", os.MFD_CLOEXEC)
    os.write(fd, b"shard bytes")
    m = dict(BY_NAME["ckpt_staged"])
    worker.send(m, fd=fd)
    os.close(fd)
    got, rfd = agent.recv(5)
    assert got == m and rfd is not None
    assert os.pread(rfd, 64, 0) == b"shard bytes"
    os.close(rfd)


def test_oversized_malformed_and_empty_packets(pair):
    agent, worker = pair
    agent.sock.sendmsg([pk({"type": "stop", "pad": "x" * protocol.MAX_MSG})])
    with pytest.raises(ProtocolError, match="more than 65536 bytes"):
        worker.recv(5)
    agent.sock.sendmsg([pk({"type": "commit", "gen": 1})])
    with pytest.raises(ProtocolError, match=r"^commit.rank: missing$"):
        worker.recv(5)
    agent.send({"type": "stop"})  # the connection is still good
    assert worker.recv(5)[0] == {"type": "stop"}
    with pytest.raises(TimeoutError):
        worker.recv(0.01)
    agent.sock.sendmsg([b""])  # a zero-length packet reads as end of stream
    with pytest.raises(AgentGone):
        worker.recv(5)
    agent.sock.close()
    with pytest.raises(AgentGone):
        worker.recv(5)
    with pytest.raises(AgentGone):
        worker.send({"type": "exiting", "reason": "x", "code": 0})


def test_from_env(pair):
    _, worker = pair
    assert AgentConnection.from_env({}) is None
    with pytest.raises(ValueError, match="EA_IPC_FD"):
        AgentConnection.from_env({"EA_IPC_FD": "three"})
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as ei:
            AgentConnection.from_env({"EA_IPC_FD": str(r)})
        assert ei.value.errno == errno.ENOTSOCK
    finally:
        os.close(r)
        os.close(w)
    fd = os.dup(worker.fileno())
    c = AgentConnection.from_env({"EA_IPC_FD": str(fd)})
    assert not os.get_inheritable(fd)
    c.close()
