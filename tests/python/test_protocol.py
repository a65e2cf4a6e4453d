"""The worker protocol against the agent's own codec (train/ipc.c).

The byte strings below were produced by ``ea_ipc_encode`` (a throwaway C
program linked against build/libea.a at commit ab3cd97), and the error texts
by ``ea_ipc_decode`` on the malformed packets: so these tests pin the Python
codec to the agent's, byte for byte and word for word, in both directions.
"""
from __future__ import annotations

import errno
import os
import socket

import msgpack
import pytest

from elastic_agent import _protocol as protocol
from elastic_agent._connection import AgentConnection
from elastic_agent.errors import AgentGone, ProtocolError
from elastic_agent.xxh3 import xxh3_64

pk = lambda d: msgpack.packb(d, use_bin_type=True)  # noqa: E731

# (name, message, ea_ipc_encode's bytes)
VECTORS = [
    ('hello',
     {'type': 'hello', 'pid': 4242, 'local_rank': 1, 'comm_addr': '10.0.0.7:41000', 'next_step': 0, 'digest': 11400714819323198485},
     '86a474797065a568656c6c6fa3706964cd1092aa6c6f63616c5f72616e6b01a9636f6d6d5f61646472ae31302e302e302e373a3431303030a96e6578745f7374657000a6646967657374cf9e3779b97f4a7c15'),
    ('ready',
     {'type': 'ready', 'gen': 3, 'comm_addr': '127.0.0.1:5000', 'next_step': 300, 'digest': 12345678901234},
     '85a474797065a57265616479a367656e03a9636f6d6d5f61646472ae3132372e302e302e313a35303030a96e6578745f73746570cd012ca6646967657374cf00000b3a73ce2ff2'),
    ('ready_nccl',
     {'type': 'ready', 'gen': 70000, 'comm_addr': '[::1]:5000', 'next_step': 8589934592, 'digest': 255, 'nccl_id': b'\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\x7f'},
     '86a474797065a57265616479a367656ece00011170a9636f6d6d5f61646472aa5b3a3a315d3a35303030a96e6578745f73746570cf0000000200000000a6646967657374ccffa76e63636c5f6964c480000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f'),
    ('step',
     {'type': 'step', 'gen': 3, 'step': 127, 'loss': 2.5, 'digest': 9223372036854775808, 'samples': 8, 'seconds': 0.0125},
     '87a474797065a473746570a367656e03a6646967657374cf8000000000000000a4737465707fa46c6f7373cb4004000000000000a773616d706c657308a77365636f6e6473cb3f8999999999999a'),
    ('step_opt',
     {'type': 'step', 'gen': 3, 'step': 128, 'loss': -0.0, 'digest': 65535, 'samples': 256, 'seconds': 1e-09, 'grad_norm': 3.25, 'compute_seconds': 0.01},
     '89a474797065a473746570a367656e03a6646967657374cdffffa473746570cc80a46c6f7373cb8000000000000000a773616d706c6573cd0100a77365636f6e6473cb3e112e0be826d695a9677261645f6e6f726dcb400a000000000000af636f6d707574655f7365636f6e6473cb3f847ae147ae147b'),
    ('failed',
     {'type': 'failed', 'gen': 4, 'error': -104, 'message': 'allreduce of step 12: Connection reset by peer', 'next_step': 12},
     '85a474797065a66661696c6564a367656e04a96e6578745f737465700ca56572726f72d098a76d657373616765d92e616c6c726564756365206f6620737465702031323a20436f6e6e656374696f6e2072657365742062792070656572'),
    ('failed_timeout',
     {'type': 'failed', 'gen': 4, 'error': -110, 'message': '', 'next_step': 0},
     '85a474797065a66661696c6564a367656e04a96e6578745f7374657000a56572726f72d092a76d657373616765a0'),
    ('failed_bigerr',
     {'type': 'failed', 'gen': 4, 'error': -100000, 'message': 'x', 'next_step': 1},
     '85a474797065a66661696c6564a367656e04a96e6578745f7374657001a56572726f72d2fffe7960a76d657373616765a178'),
    ('aborted',
     {'type': 'aborted', 'gen': 9, 'next_step': 77},
     '83a474797065a761626f72746564a367656e09a96e6578745f737465704d'),
    ('done',
     {'type': 'done', 'gen': 9, 'next_step': 1000, 'digest': 42},
     '84a474797065a4646f6e65a367656e09a96e6578745f73746570cd03e8a66469676573742a'),
    ('exiting',
     {'type': 'exiting', 'reason': 'stop', 'code': 0},
     '83a474797065a765786974696e67a6726561736f6ea473746f70a4636f646500'),
    ('exiting_200',
     {'type': 'exiting', 'reason': 'RuntimeError: boom', 'code': 200},
     '83a474797065a765786974696e67a6726561736f6eb252756e74696d654572726f723a20626f6f6da4636f6465ccc8'),
    ('exiting_neg',
     {'type': 'exiting', 'reason': 'sig', 'code': -40000},
     '83a474797065a765786974696e67a6726561736f6ea3736967a4636f6465d2ffff63c0'),
    ('ckpt_staged',
     {'type': 'ckpt_staged', 'gen': 5, 'step': 20, 'rank': 1, 'world': 3, 'offset': 50331, 'length': 50331, 'total': 150994, 'hash': 16045690984503111693, 'stall_us': 64, 'wait_us': 0, 'skipped': 2},
     '8ca474797065ab636b70745f737461676564a367656e05a47374657014a472616e6b01a5776f726c6403a66f6666736574cdc49ba66c656e677468cdc49ba5746f74616cce00024dd2a468617368cfdeadbeefcafef00da87374616c6c5f757340a7776169745f757300a7736b697070656402'),
    ('ckpt_skipped',
     {'type': 'ckpt_skipped', 'gen': 5, 'step': 25, 'rank': 0, 'world': 3, 'reason': 'busy: step 20 is still being written', 'skipped': 3},
     '87a474797065ac636b70745f736b6970706564a367656e05a47374657019a6726561736f6ed924627573793a2073746570203230206973207374696c6c206265696e67207772697474656ea472616e6b00a5776f726c6403a7736b697070656403'),
    ('ckpt_loaded',
     {'type': 'ckpt_loaded', 'gen': 6, 'step': 100, 'name': 'step-100.gen-5', 'digest': 7, 'fallbacks': 1, 'message': 'shard 1: content does not match', 'seconds': 0.25},
     '88a474797065ab636b70745f6c6f61646564a367656e06a664696765737407a47374657064a77365636f6e6473cb3fd0000000000000a76d657373616765bf736861726420313a20636f6e74656e7420646f6573206e6f74206d61746368a46e616d65ae737465702d3130302e67656e2d35a966616c6c6261636b7301'),
    ('prepare',
     {'type': 'prepare', 'gen': 7, 'at_boundary': False},
     '83a474797065a770726570617265a367656e07ab61745f626f756e64617279c2'),
    ('prepare_nccl',
     {'type': 'prepare', 'gen': 7, 'at_boundary': True, 'make_nccl_id': True},
     '84a474797065a770726570617265a367656e07ab61745f626f756e64617279c3ac6d616b655f6e63636c5f6964c3'),
    ('commit',
     {'type': 'commit', 'gen': 7, 'rank': 1, 'world': 3, 'peers': ['127.0.0.1:5000', '127.0.0.1:5001', '[fe80::1]:65535'], 'sync_root': 2, 'backend': 'tcp', 'timeout_ms': 5000},
     '88a474797065a6636f6d6d6974a367656e07a472616e6b01a5776f726c6403a5706565727393ae3132372e302e302e313a35303030ae3132372e302e302e313a35303031af5b666538303a3a315d3a3635353335a973796e635f726f6f7402a76261636b656e64a3746370aa74696d656f75745f6d73cd1388'),
    ('commit_nccl',
     {'type': 'commit', 'gen': 8, 'rank': 0, 'world': 2, 'peers': [], 'sync_root': 1, 'backend': 'nccl', 'timeout_ms': 30000, 'nccl_id': b'\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab\xab'},
     '89a474797065a6636f6d6d6974a367656e08a472616e6b00a5776f726c6402a5706565727390a973796e635f726f6f7401a76261636b656e64a46e63636caa74696d656f75745f6d73cd7530a76e63636c5f6964c480abababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababababab'),
    ('commit_ckpt',
     {'type': 'commit', 'gen': 8, 'rank': 0, 'world': 1, 'peers': ['h:1'], 'sync_root': 0, 'backend': 'tcp', 'timeout_ms': 300, 'ckpt_interval': 20, 'ckpt_busy': 'skip', 'ckpt_dir': '/ck', 'resume': 'latest', 'ckpt_verify': 'size'},
     '8da474797065a6636f6d6d6974a367656e08a472616e6b00a5776f726c6401a5706565727391a3683a31a973796e635f726f6f7400a76261636b656e64a3746370aa74696d656f75745f6d73cd012cad636b70745f696e74657276616c14a9636b70745f62757379a4736b6970a8636b70745f646972a32f636ba6726573756d65a66c6174657374ab636b70745f766572696679a473697a65'),
    ('commit_ckpt_wait',
     {'type': 'commit', 'gen': 8, 'rank': 0, 'world': 1, 'peers': ['h:1'], 'sync_root': 0, 'backend': 'tcp', 'timeout_ms': 300, 'ckpt_interval': 5, 'ckpt_dir': '/ck'},
     '8ba474797065a6636f6d6d6974a367656e08a472616e6b00a5776f726c6401a5706565727391a3683a31a973796e635f726f6f7400a76261636b656e64a3746370aa74696d656f75745f6d73cd012cad636b70745f696e74657276616c05a9636b70745f62757379a477616974a8636b70745f646972a32f636b'),
    ('commit_20',
     {'type': 'commit', 'gen': 9, 'rank': 0, 'world': 20, 'peers': ['10.1.0.0:29500', '10.1.1.7:29500', '10.1.2.14:29500', '10.1.3.21:29500', '10.1.4.28:29500', '10.1.5.35:29500', '10.1.6.42:29500', '10.1.7.49:29500', '10.1.8.56:29500', '10.1.9.63:29500', '10.1.10.70:29500', '10.1.11.77:29500', '10.1.12.84:29500', '10.1.13.91:29500', '10.1.14.98:29500', '10.1.15.105:29500', '10.1.16.112:29500', '10.1.17.119:29500', '10.1.18.126:29500', '10.1.19.133:29500'], 'sync_root': 0, 'backend': 'tcp', 'timeout_ms': 70000},
     '88a474797065a6636f6d6d6974a367656e09a472616e6b00a5776f726c6414a57065657273dc0014ae31302e312e302e303a3239353030ae31302e312e312e373a3239353030af31302e312e322e31343a3239353030af31302e312e332e32313a3239353030af31302e312e342e32383a3239353030af31302e312e352e33353a3239353030af31302e312e362e34323a3239353030af31302e312e372e34393a3239353030af31302e312e382e35363a3239353030af31302e312e392e36333a3239353030b031302e312e31302e37303a3239353030b031302e312e31312e37373a3239353030b031302e312e31322e38343a3239353030b031302e312e31332e39313a3239353030b031302e312e31342e39383a3239353030b131302e312e31352e3130353a3239353030b131302e312e31362e3131323a3239353030b131302e312e31372e3131393a3239353030b131302e312e31382e3132363a3239353030b131302e312e31392e3133333a3239353030a973796e635f726f6f7400a76261636b656e64a3746370aa74696d656f75745f6d73ce00011170'),
    ('pause',
     {'type': 'pause', 'reason': 'minority side of a partition'},
     '82a474797065a57061757365a6726561736f6ebc6d696e6f726974792073696465206f66206120706172746974696f6e'),
    ('stop',
     {'type': 'stop'},
     '81a474797065a473746f70'),
    ('ckpt_done',
     {'type': 'ckpt_done', 'gen': 5, 'step': 20, 'status': 0, 'message': ''},
     '85a474797065a9636b70745f646f6e65a367656e05a47374657014a76d657373616765a0a673746174757300'),
    ('ckpt_done_enospc',
     {'type': 'ckpt_done', 'gen': 5, 'step': 20, 'status': -28, 'message': 'write /ck/x: No space left on device'},
     '85a474797065a9636b70745f646f6e65a367656e05a47374657014a76d657373616765d9247772697465202f636b2f783a204e6f207370616365206c656674206f6e20646576696365a6737461747573e4'),
    ('failed_peer',
     {'type': 'failed', 'gen': 4, 'error': -110, 'message': 'connecting rank 1/5: Connection timed out', 'next_step': 905, 'peer': 2},
     '86a474797065a66661696c6564a367656e04a96e6578745f73746570cd0389a56572726f72d092a76d657373616765d929636f6e6e656374696e672072616e6b20312f353a20436f6e6e656374696f6e2074696d6564206f7574a47065657202'),
]


@pytest.mark.parametrize("name,msg,hexbytes", VECTORS, ids=[v[0] for v in VECTORS])
def test_encode_is_the_agents_bytes(name, msg, hexbytes):
    assert protocol.encode(msg).hex() == hexbytes


@pytest.mark.parametrize("name,msg,hexbytes", VECTORS, ids=[v[0] for v in VECTORS])
def test_decode_of_the_agents_bytes(name, msg, hexbytes):
    want = dict(msg)
    if name == "commit_ckpt_wait":
        want["ckpt_busy"] = "wait"  # the agent writes the busy policy with every interval
    assert protocol.decode(bytes.fromhex(hexbytes)) == want


def test_every_message_type_has_a_vector():
    assert {m["type"] for _, m, _ in VECTORS} == set(protocol.TYPES)
    assert protocol.WORKER_TO_AGENT | protocol.AGENT_TO_WORKER == set(protocol.TYPES)


def test_largest_commit_fits_and_matches():
    """512 peers of the longest form: ≈ 49 KiB, one packet (EA_IPC_MAX_PEERS)."""
    m = dict(type="commit", gen=9, rank=0, world=512, peers=["a" * 95] * 512, sync_root=0,
             backend="tcp", timeout_ms=1, ckpt_dir="/d")
    b = protocol.encode(m)
    assert (len(b), xxh3_64(b)) == (49753, 0x933EFBFC67CCF82E)
    assert protocol.decode(b) == m


COMMIT = dict(type="commit", gen=7, rank=1, world=3, peers=["a:1", "b:2", "c:3"], sync_root=2,
              backend="tcp", timeout_ms=5000)


def _commit(**kw):
    d = dict(COMMIT)
    for k, v in kw.items():
        if v is ...:
            del d[k]
        else:
            d[k] = v
    return pk(d)


def _hello(**kw):
    d = dict(type="hello", pid=1, local_rank=0, comm_addr="a:1", next_step=0, digest=0)
    d.update(kw)
    return pk(d)


def _staged(**kw):
    d = dict(type="ckpt_staged", gen=1, step=1, rank=0, world=1, offset=0, length=0, total=0,
             hash=0, stall_us=0, wait_us=0, skipped=0)
    d.update(kw)
    return pk(d)


_HELLO_PID_SIGNED = "86a474797065a568656c6c6fa3706964d0%saa6c6f63616c5f72616e6b00a9636f6d6d5f61646472a3613a31a96e6578745f7374657000a664696765737400"

# (packet, the agent's error) — every text is what ea_ipc_decode says
MALFORMED = [
    (b"", "message: expected a map (truncated)"),
    (b"\x90", "message: expected a map (wrong type)"),
    (b"\x81", "message: expected a map (truncated)"),
    (b"\x81\xa4type", "type: truncated"),
    (b"\x81\x01\x02", "message: key 0: expected str"),
    (b"\x80", "type: missing"),
    (pk({"type": "nope"}), 'type: unknown message type "nope"'),
    (pk({"type": 5}), "type: expected str"),
    (pk({"type": "x" * 20}), "type: too long"),
    (pk({"type": "st\0p"}), "type: contains a NUL byte"),
    (bytes.fromhex("82a474797065a473746f70a474797065a473746f70"), "type: duplicate key"),
    (pk({"type": "stop"}) + b"\x00", "stop: 1 trailing bytes after the map"),
    (pk({"type": "stop", "junk": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}), 'message: value of "junk": out of range'),
    (pk({"type": "hello", "pid": 1}), "hello.local_rank: missing"),
    (_hello(pid=-1), "hello.pid: out of range"),
    (_hello(local_rank=1 << 32), "hello.local_rank: out of range"),
    (_hello(local_rank=True), "hello.local_rank: expected uint"),
    (_hello(pid=1.5), "hello.pid: expected uint"),
    (_hello(comm_addr=""), "hello.comm_addr: expected a non-empty address < 96 bytes"),
    (_hello(comm_addr="a" * 96), "hello.comm_addr: too long"),
    (_hello(comm_addr=b"a:1"), "hello.comm_addr: expected str"),
    (_hello(comm_addr="a\0:1"), "hello.comm_addr: contains a NUL byte"),
    (bytes.fromhex(_HELLO_PID_SIGNED % "f0"), "hello.pid: out of range"),
    (bytes.fromhex("87a474797065a568656c6c6fa3706964d00aa3706964d00aaa6c6f63616c5f72616e6b00a9636f6d6d5f61646472a3613a31a96e6578745f7374657000a664696765737400"),
     "hello.pid: duplicate key"),
    (pk({"type": "step", "gen": 1, "step": 1, "loss": "x", "digest": 0, "samples": 1, "seconds": 1}),
     "step.loss: expected float"),
    (pk({"type": "failed", "gen": 1, "error": 0, "message": "", "next_step": 0}),
     "failed.error: expected a negative errno, got 0"),
    (pk({"type": "failed", "gen": 1, "error": -(2 ** 31) - 1, "message": "", "next_step": 0}),
     "failed.error: out of range"),
    (pk({"type": "failed", "gen": 1, "error": -5, "message": "m" * 256, "next_step": 0}),
     "failed.message: too long"),
    (pk({"type": "ckpt_done", "gen": 1, "step": 1, "status": 1, "message": ""}),
     "ckpt_done.status: expected 0 or a negative errno, got 1"),
    (_staged(rank=3, world=3), "ckpt_staged.rank: 3 not below world 3"),
    (_staged(world=0), "ckpt_staged.rank: 0 not below world 0"),
    (_staged(offset=5, length=6, total=10), "ckpt_staged.length: [5, +6) leaves the 10-byte state"),
    (pk({"type": "ckpt_skipped", "gen": 1, "step": 1, "rank": 2, "world": 1, "reason": "", "skipped": 0}),
     "ckpt_skipped.rank: 2 not below world 1"),
    (pk({"type": "prepare", "gen": 1, "at_boundary": 0}), "prepare.at_boundary: expected bool"),
    (pk({"type": "prepare", "gen": 1}), "prepare.at_boundary: missing"),
    (pk({"type": "prepare", "at_boundary": False}), "prepare.gen: missing"),
    (_commit(world=0, peers=[]), "commit.world: must be >= 1"),
    (_commit(rank=3), "commit.rank: 3 not below world 3"),
    (_commit(sync_root=3), "commit.sync_root: 3 not below world 3"),
    (_commit(backend="gloo"), 'commit.backend: expected "tcp" or "nccl"'),
    (_commit(backend="nccl"), "commit.nccl_id: required by backend nccl"),
    (_commit(backend="nccl", peers=["a:1"]), "commit.peers: 1 addresses for world 3"),
    (_commit(peers=["a:1", "b:2"]), "commit.peers: 2 addresses for world 3"),
    (_commit(peers=["a:1", "b:2", "c" * 96]), "commit.peers[2]: too long"),
    (_commit(peers=["a:1", "", "c:3"]), "commit.peers[1]: expected a non-empty address < 96 bytes"),
    (_commit(peers=["a:1", 5, "c:3"]), "commit.peers[1]: expected str"),
    (_commit(peers="a:1"), "commit.peers: expected array"),
    (_commit(peers=["x:1"] * 513, world=513), "commit.peers: too many addresses"),
    (_commit(nccl_id=b"x" * 127), "commit.nccl_id: expected 128 bytes"),
    (_commit(nccl_id="x" * 128), "commit.nccl_id: expected bin"),
    (_commit(ckpt_busy="skip"), 'commit.ckpt_busy: "skip" without ckpt_interval'),
    (_commit(ckpt_busy="sometimes", ckpt_interval=3), "commit.ckpt_busy: too long"),
    (_commit(ckpt_verify="size"), "commit.ckpt_verify: without resume"),
    (_commit(resume="latest"), "commit.resume: needs ckpt_dir"),
    (_commit(ckpt_dir="/" + "d" * 4095), "commit.ckpt_dir: too long"),
    (_commit(timeout_ms=...), "commit.timeout_ms: missing"),
    (_commit(gen=..., timeout_ms=...), "commit.gen: missing"),
    (pk({"type": "pause"}), "pause.reason: missing"),
    (pk({"type": "pause", "reason": 7}), "pause.reason: expected str"),
    # the package's extension keys, with the agent's own texts (train/ipc.c;
    # tests/unit/test_ipc.c checks the same four)
    (_commit(store="", torch_backend="gloo"), "commit.store: expected a non-empty address < 96 bytes"),
    (_commit(torch_backend="mpi"), 'commit.torch_backend: expected "gloo" or "nccl"'),
    (_staged(layout="ea-state-1"), "ckpt_staged.header_bytes: required with layout"),
    (_staged(layout="ea-state-1", header_bytes=64, total=10, length=10), "ckpt_staged.header_bytes: 64 beyond the 10-byte state"),
]


@pytest.mark.parametrize("packet,error", MALFORMED, ids=[e for _, e in MALFORMED])
def test_malformed_packet_names_the_field(packet, error):
    with pytest.raises(ProtocolError) as ei:
        protocol.decode(packet)
    assert str(ei.value) == error


# (packet, ea_ipc_decode + ea_ipc_encode of the result): accepted variants
ACCEPTED = [
    (pk({"type": "stop", "junk": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}), "81a474797065a473746f70"),
    (pk({"type": "stop", "x": msgpack.ExtType(3, b"abc"), "y": {1: 2}}), "81a474797065a473746f70"),
    (pk({"type": "stop", "gen": "ignored", "reason": None}), "81a474797065a473746f70"),
    (bytes.fromhex(_HELLO_PID_SIGNED % "0a"),
     "86a474797065a568656c6c6fa37069640aaa6c6f63616c5f72616e6b00a9636f6d6d5f61646472a3613a31a96e6578745f7374657000a664696765737400"),
    (pk({"type": "step", "gen": 1, "step": 1, "loss": 3, "digest": 0, "samples": 1, "seconds": -1}),
     "87a474797065a473746570a367656e01a664696765737400a47374657001a46c6f7373cb4008000000000000a773616d706c657301a77365636f6e6473cbbff0000000000000"),
    (msgpack.packb({"type": "step", "gen": 1, "step": 1, "loss": 1.5, "digest": 0, "samples": 1, "seconds": 1.0},
                   use_single_float=True),
     "87a474797065a473746570a367656e01a664696765737400a47374657001a46c6f7373cb3ff8000000000000a773616d706c657301a77365636f6e6473cb3ff0000000000000"),
]


@pytest.mark.parametrize("packet,reencoded", ACCEPTED)
def test_accepted_variants_reencode_as_the_agent_does(packet, reencoded):
    assert protocol.encode(protocol.decode(packet)).hex() == reencoded


def test_unknown_keys_are_skipped_both_ways():
    m = protocol.decode(pk({"future_key": {"a": [1, 2]}, "type": "aborted", "gen": 3, "next_step": 4}))
    assert m == {"type": "aborted", "gen": 3, "next_step": 4}
    # The package's extension keys round-trip; a COMMIT without them encodes
    # as ea_ipc_encode does (AGENT_VIEW; the agent reads store/torch_backend
    # too since h10b: tests/unit/test_ipc.c compares the doc's vectors).
    ext = dict(COMMIT, store="h:1", torch_backend="gloo")
    assert protocol.decode(protocol.encode(ext)) == ext
    AGENT_VIEW = ("88a474797065a6636f6d6d6974a367656e07a472616e6b01a5776f726c6403a5706565727393a3613a31a362"
                  "3a32a3633a33a973796e635f726f6f7402a76261636b656e64a3746370aa74696d656f75745f6d73cd1388")
    assert protocol.encode(COMMIT).hex() == AGENT_VIEW
    staged = dict(VECTORS[13][1], layout="ea-state-1", header_bytes=128)
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
    for _, msg, hx in VECTORS:
        src, dst = (worker, agent) if msg["type"] in protocol.WORKER_TO_AGENT else (agent, worker)
        src.send(msg)
        raw, fds = dst.recv_raw(5)
        assert raw.hex() == hx and fds == []


def test_memfd_rides_with_ckpt_staged(pair):
    agent, worker = pair
    fd = os.memfd_create("t", os.MFD_CLOEXEC)
    os.write(fd, b"shard bytes")
    m = dict(VECTORS[13][1])
    assert m["type"] == "ckpt_staged"
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
