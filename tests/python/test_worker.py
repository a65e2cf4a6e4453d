"""The generation loop against a fake agent, without torch: every message of
the protocol from the worker's side — hello, prepare/ready, commit, step,
failed, aborted, done, exiting, pause, stop, the checkpoint staging with its
memfd and busy policies, resume from a checkpoint directory, and what a
worker does with malformed or stale agent messages.

The worker runs in a thread of the test (SoloBackend, world 1, an
ObjectState); the test plays the agent on the other end of the socketpair.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time

import msgpack

from ckpt_util import write_checkpoint
from conftest import PYDIR, FakeAgent
from elastic_agent import ObjectState, split_range
from elastic_agent._connection import AgentConnection
from elastic_agent.errors import AgentGone, CommError
from elastic_agent.layout import parse_header
from elastic_agent.state import State
from elastic_agent.worker import SoloBackend, Worker
from elastic_agent.xxh3 import xxh3_64

B = 12  # global batch


class Run:
    """A Worker in a thread, on the worker's end of the fake agent's pair."""

    def __init__(self, fa: FakeAgent, state: State, fn, local_rank: int = 2) -> None:
        self.w = Worker(state, backend=SoloBackend(), conn=AgentConnection(fa.child),
                        handle_sigterm=False, environ={"EA_LOCAL_RANK": str(local_rank)})
        self.result = self.exc = None
        self.t = threading.Thread(target=self._main, daemon=True)
        self.t.start()

    def _main(self) -> None:
        try:
            self.result = self.w.run(self.fn_)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.exc = e

    def join(self, timeout: float = 10.0) -> None:
        self.t.join(timeout)
        assert not self.t.is_alive(), "the worker did not return"


def steps(state, n=None, pace=0.0005, fail_at=None, boom_at=None):
    def fn(gen):
        while n is None or state.step < n:
            gen.shard(B)
            state.counter += 1
            if pace:
                time.sleep(pace)  # rate limit only: the agent reads every report
            if fail_at is not None and state.step == fail_at and gen.gen == 1:
                raise CommError("allreduce of step %d: Connection reset by peer" % state.step, errno.ECONNRESET)
            if boom_at is not None and state.step == boom_at:
                raise ValueError("boom")
            gen.report(loss=1.0 / (state.step + 1), compute_time=0.001)
        return "finished"
    return fn


def start(fa, state, fn, **kw):
    Run.fn_ = staticmethod(fn)
    r = Run(fa, state, fn, **kw)
    hello = fa.expect("hello")
    return r, hello


def commit(gen, addr, **kw):
    m = dict(type="commit", gen=gen, rank=0, world=1, peers=[addr], sync_root=0, backend="tcp",
             timeout_ms=1000)
    m.update(kw)
    return m


def test_a_whole_run(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st, n=5))
    assert hello["pid"] == os.getpid() and hello["local_rank"] == 2
    assert hello["next_step"] == 0 and hello["digest"] == st.params_digest()
    addr = hello["comm_addr"]
    agent.send(type="prepare", gen=1, at_boundary=False, make_nccl_id=True)
    ready = agent.expect("ready")
    assert ready == {"type": "ready", "gen": 1, "comm_addr": addr, "next_step": 0,
                     "digest": st.params_digest(), "nccl_id": bytes(128)}
    agent.send(**commit(1, addr))
    for s in range(5):
        m = agent.expect("step")
        assert (m["gen"], m["step"], m["samples"], m["loss"]) == (1, s, B, 1.0 / (s + 1))
        assert m["compute_seconds"] == 0.001 and m["seconds"] > 0
    done = agent.expect("done")
    assert (done["gen"], done["next_step"]) == (1, 5)
    agent.send(type="stop")
    assert agent.expect("exiting") == {"type": "exiting", "reason": "stop", "code": 0}
    r.join()
    assert r.exc is None and r.result == "finished" and st.step == 5 and st.counter == 5


def test_a_generations_timing_is_stamped_in_order(agent):
    """Generation.timing (the join-stall breakdown of docs/pytorch.md): the
    stamps of PREPARE, READY, COMMIT, the old group gone, the new one formed,
    the state synced and the first step, in that order; no step before this
    generation: last_step 0.  A second generation stamps the first one's
    last report (before its READY)."""
    st = ObjectState(counter=0)
    gens = []
    inner = steps(st, n=None)

    def fn(gen):
        gens.append(gen)
        return inner(gen)

    r, hello = start(agent, st, fn)
    addr = hello["comm_addr"]
    t0 = time.time()
    agent.send(type="prepare", gen=1, at_boundary=False, make_nccl_id=False)
    agent.expect("ready")
    agent.send(**commit(1, addr))
    agent.expect("step")
    agent.send(type="prepare", gen=2, at_boundary=True, make_nccl_id=False)
    agent.expect("ready", skip=("step",))
    last = [m["step"] for m in agent.log if m["type"] == "step"][-1]
    agent.send(**commit(2, addr))
    agent.expect("step", skip=("step",))
    agent.send(type="stop")
    agent.expect("exiting", skip=("step",))
    r.join()
    keys = ["prepare", "ready", "commit", "destroyed", "formed", "synced", "first_step"]
    one, two = gens[0].timing, gens[1].timing
    assert one["last_step"] == 0
    assert [one[k] for k in keys] == sorted(one[k] for k in keys) and one["prepare"] >= t0
    assert [two[k] for k in keys] == sorted(two[k] for k in keys)
    # at a boundary the step in flight ends after PREPARE came, before READY
    assert one["first_step"] <= two["last_step"] <= two["ready"] and last >= 0


def test_pause_keeps_state_and_a_new_generation_continues(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st))
    addr = hello["comm_addr"]
    agent.send(**commit(1, addr))
    last = [agent.expect("step")["step"] for _ in range(3)][-1]
    agent.send(type="pause", reason="minority side of a partition")
    ab = agent.expect("aborted", skip=("step",))
    steps_seen = [m["step"] for m in agent.log if m["type"] == "step"]
    assert ab["gen"] == 1 and ab["next_step"] == steps_seen[-1] + 1 >= last + 1
    assert st.step == ab["next_step"]
    agent.send(**commit(2, addr))
    first = agent.expect("step")
    assert (first["gen"], first["step"]) == (2, ab["next_step"])  # nothing lost, nothing repeated
    agent.send(type="stop")
    agent.expect("exiting", skip=("step",))
    r.join()
    assert r.exc is None


def test_prepare_now_ends_the_generation_and_stale_orders_are_ignored(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st))
    addr = hello["comm_addr"]
    agent.send(**commit(5, addr))
    agent.expect("step")
    agent.send(type="prepare", gen=3, at_boundary=False)  # older than 5: ignored
    agent.send(**commit(4, addr))                        # likewise
    agent.send(type="prepare", gen=6, at_boundary=True)
    ready = agent.expect("ready", skip=("step",))
    assert ready["gen"] == 6 and ready["next_step"] == st.step
    assert [m for m in agent.log if m["type"] == "ready"] == [ready]
    before = len(agent.log)
    agent.send(**commit(6, addr))
    m = agent.expect("step")
    assert (m["gen"], m["step"]) == (6, ready["next_step"])
    assert all(x["type"] == "step" for x in agent.log[before:])
    agent.send(type="stop")
    agent.expect("exiting", skip=("step",))
    r.join()


def test_failed_collective_keeps_the_state(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st, fail_at=4))
    addr = hello["comm_addr"]
    agent.send(**commit(1, addr))
    f = agent.expect("failed", skip=("step",))
    assert f["gen"] == 1 and f["error"] == -errno.ECONNRESET and f["next_step"] == 4
    assert "Connection reset by peer" in f["message"]
    assert [m["step"] for m in agent.log if m["type"] == "step"] == [0, 1, 2, 3]
    agent.send(type="prepare", gen=2, at_boundary=False)
    assert agent.expect("ready")["next_step"] == 4
    agent.send(**commit(2, addr))
    assert agent.expect("step")["step"] == 4
    agent.send(type="stop")
    agent.expect("exiting", skip=("step",))
    r.join()


def test_the_programs_own_error_is_exiting_1(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st, boom_at=2))
    agent.send(**commit(1, hello["comm_addr"]))
    ex = agent.expect("exiting", skip=("step",))
    assert ex == {"type": "exiting", "reason": "ValueError: boom", "code": 1}
    r.join()
    assert isinstance(r.exc, ValueError)


def test_bad_agent_packets_are_dropped_and_the_worker_goes_on(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st, n=2))
    agent.send_raw(b"\xc1garbage")
    agent.send_raw(msgpack.packb({"type": "commit", "gen": 1, "rank": 0}))
    agent.send_raw(msgpack.packb({"type": "hello"}))  # a valid packet, the wrong direction
    agent.send(type="ckpt_done", gen=1, step=3, status=0, message="")  # none in flight
    agent.send(**commit(1, hello["comm_addr"]))
    assert agent.expect("done", skip=("step",))["next_step"] == 2
    agent.send(type="stop")
    agent.expect("exiting")
    r.join()
    assert r.exc is None


def test_the_agent_going_away_ends_the_worker(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st))
    agent.send(**commit(1, hello["comm_addr"]))
    agent.expect("step")
    agent.sock.close()
    r.join()
    assert isinstance(r.exc, AgentGone)


def _staged(agent, timeout=10.0):
    m = agent.expect("ckpt_staged", skip=("step",), keep_fd=True, timeout=timeout)
    fd = m.pop("_fd")
    assert fd is not None, "ckpt_staged without its memfd"
    data = os.pread(fd, m["length"] + 1, 0)
    os.close(fd)
    return m, data


def test_checkpoint_staging_through_the_memfd(agent):
    st = ObjectState(counter=0, blob=bytearray(os.urandom(3000)))
    # 20 ms a step: the answer to step 3's shard (sent after checking it
    # here) must arrive before step 6, or the worker rightly waits for it
    # (wait_us > 0) — at 0.5 ms a step it did not always, on a loaded machine
    r, hello = start(agent, st, steps(st, pace=0.02))
    agent.send(**commit(1, hello["comm_addr"], ckpt_interval=3, ckpt_dir="/nonexistent"))
    m, data = _staged(agent)
    assert m["step"] == 3 and (m["rank"], m["world"]) == (0, 1)
    assert (m["offset"], m["length"]) == split_range(m["total"], 1, 0)[0:1] + (m["total"],)
    assert len(data) == m["length"] and m["hash"] == xxh3_64(data)
    assert m["layout"] == "ea-state-1" and m["skipped"] == 0
    specs, h, total = parse_header(data)
    assert h == m["header_bytes"] and total == m["total"]
    probe = ObjectState(counter=0, blob=bytearray())
    probe.load(data)
    assert probe.step == 3 and probe.counter == 3 and probe.blob == st.blob
    agent.send(type="ckpt_done", gen=1, step=3, status=0, message="")
    m2, _ = _staged(agent)
    assert m2["step"] == 6 and m2["wait_us"] == 0
    # policy "skip": the shard of 6 is never answered, so 9 is skipped and counted
    agent.send(type="prepare", gen=2, at_boundary=True)
    agent.expect("ready", skip=("step",))
    agent.send(**commit(2, hello["comm_addr"], ckpt_interval=3, ckpt_busy="skip", ckpt_dir="/x"))
    sk = agent.expect("ckpt_skipped", skip=("step",))
    assert sk["step"] % 3 == 0 and sk["skipped"] == 1 and sk["reason"] == "busy: step 6 is still being written"
    agent.send(type="ckpt_done", gen=1, step=6, status=-28, message="No space left on device")
    m3, _ = _staged(agent)
    assert m3["gen"] == 2 and m3["skipped"] == 1
    agent.send(type="stop")
    agent.expect("exiting", skip=("step", "ckpt_staged", "ckpt_skipped"))
    r.join()


def test_ckpt_at_stages_the_named_step_and_refuses_a_passed_one(agent):
    """The checkpoint before a mass preemption: ckpt_at names a step that
    is no multiple of ckpt_interval; the worker stages exactly there, and a
    step it has completed already is answered ckpt_skipped (the agent then
    asks for a later one)."""
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st, pace=0.01))
    agent.send(**commit(1, hello["comm_addr"], ckpt_interval=100000, ckpt_dir="/x"))
    s = agent.expect("step")["step"]
    at = s + 20
    agent.send(type="ckpt_at", gen=1, step=at)
    m, data = _staged(agent)
    assert (m["gen"], m["step"]) == (1, at)
    probe = ObjectState(counter=0)
    probe.load(data)
    assert probe.step == at and probe.counter == at
    agent.send(type="ckpt_done", gen=1, step=at, status=0, message="")
    agent.send(type="ckpt_at", gen=1, step=2)  # long completed
    sk = agent.expect("ckpt_skipped", skip=("step",))
    assert sk["step"] == 2 and sk["reason"].startswith("step 2 is already completed")
    agent.send(type="stop")
    agent.expect("exiting", skip=("step", "ckpt_staged", "ckpt_skipped"))
    r.join()


def test_busy_policy_wait_is_bounded_by_half_the_timeout(agent):
    st = ObjectState(counter=0)
    r, hello = start(agent, st, steps(st))
    agent.send(**commit(1, hello["comm_addr"], ckpt_interval=2, ckpt_dir="/x", timeout_ms=200))
    _staged(agent)                              # step 2, never answered
    t0 = time.monotonic()
    sk = agent.expect("ckpt_skipped", skip=("step",))
    assert sk["reason"] == "busy: step 2 still being written after 100 ms"
    assert 0.09 < time.monotonic() - t0 < 2.0
    agent.send(type="ckpt_done", gen=1, step=2, status=0, message="")
    m, _ = _staged(agent)
    assert m["skipped"] == 1
    # a wait the agent answers: waited, then staged, wait_us reported
    agent.send(type="ckpt_done", gen=1, step=m["step"], status=0, message="")
    agent.send(type="stop")
    agent.expect("exiting", skip=("step", "ckpt_staged", "ckpt_skipped"))
    r.join()


def _checkpoint_of(st_factory, n_steps, tmp_path, world=2, gen=3):
    """Run a worker for n_steps with checkpoints, return the staged state."""
    fa = FakeAgent()
    try:
        st = st_factory()
        r, hello = start(fa, st, steps(st, n=n_steps))
        fa.send(**commit(gen, hello["comm_addr"], ckpt_interval=n_steps, ckpt_dir=str(tmp_path)))
        m, data = _staged(fa)
        digest = [x for x in fa.log if x["type"] == "step"][-1]["digest"]
        fa.send(type="ckpt_done", gen=gen, step=n_steps, status=0, message="")
        fa.expect("done", skip=("step",))
        fa.send(type="stop")
        fa.expect("exiting")
        r.join()
        return data, digest
    finally:
        fa.close()


def test_cold_start_resumes_from_the_newest_checkpoint(agent, tmp_path):
    mk = lambda: ObjectState(counter=0, blob=bytearray(b"x" * 500))  # noqa: E731
    data, digest = _checkpoint_of(mk, 4, tmp_path)
    d = str(tmp_path / "ck")
    write_checkpoint(d, 4, 3, data, world=2)
    newer = write_checkpoint(d, 8, 3, data, world=3)
    with open(os.path.join(newer, "shard-1-of-3.bin"), "r+b") as f:  # damage the newest
        f.write(b"\xff")
    st = mk()
    r, hello = start(agent, st, steps(st, n=6))
    agent.send(**commit(5, hello["comm_addr"], ckpt_dir=d, resume="latest"))
    ld = agent.expect("ckpt_loaded")
    assert (ld["gen"], ld["step"], ld["name"], ld["digest"]) == (5, 4, "step-4.gen-3", digest)
    assert ld["fallbacks"] == 1 and "shard 1" in ld["message"] and "does not match" in ld["message"]
    first = agent.expect("step")
    assert first["step"] == 4
    assert agent.expect("done", skip=("step",))["next_step"] == 6
    assert st.counter == 6  # 4 steps from the checkpoint's state, then 2 here
    agent.send(type="stop")
    agent.expect("exiting")
    r.join()


def test_resume_errors_are_failed_with_the_reason(agent, tmp_path):
    mk = lambda: ObjectState(counter=0, blob=bytearray(b"x" * 10))  # noqa: E731
    data, _ = _checkpoint_of(mk, 2, tmp_path)
    d = str(tmp_path / "ck")
    write_checkpoint(d, 2, 1, data, world=1)
    st = ObjectState(counter=0, other=1)  # another program
    r, hello = start(agent, st, steps(st, n=3))
    agent.send(**commit(2, hello["comm_addr"], ckpt_dir=d, resume="latest"))
    f = agent.expect("failed")
    assert f["error"] == -errno.EPROTO and f["next_step"] == 0
    assert f["message"] == "resume from step-2.gen-1: checkpoint step-2.gen-1: extras.other: missing"
    agent.send(**commit(3, hello["comm_addr"], ckpt_dir=d, resume="7"))
    f = agent.expect("failed")
    assert f["error"] == -errno.ENOENT and "no complete checkpoint of step 7" in f["message"]
    agent.send(**commit(4, hello["comm_addr"], ckpt_dir=str(tmp_path / "empty"), resume="latest"))
    assert agent.expect("step")["step"] == 0  # nothing to resume from: a fresh start
    agent.send(type="stop")
    agent.expect("exiting", skip=("step", "done"))
    r.join()


SIGTERM_PROG = r"""
import time, sys
import elastic_agent
from elastic_agent.worker import SoloBackend
st = elastic_agent.ObjectState(n=0)
def fn(gen):
    while True:
        time.sleep(0.001)
        gen.report(loss=0.0)
elastic_agent.run(st, fn, backend=SoloBackend())
"""


def test_sigterm_stops_the_worker_with_143(agent, procs, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(SIGTERM_PROG)
    p = procs.start(str(prog), [], {}, agent)
    hello = agent.expect("hello", timeout=20)
    assert hello["pid"] == p.pid
    agent.send(**commit(1, hello["comm_addr"]))
    agent.expect("step")
    os.kill(p.pid, signal.SIGTERM)
    ex = agent.expect("exiting", skip=("step",))
    assert ex == {"type": "exiting", "reason": "SIGTERM", "code": 143}
    assert p.wait(10) == 143


ALONE_PROG = r"""
import elastic_agent
from elastic_agent.worker import SoloBackend
st = elastic_agent.ObjectState(n=0)
def fn(gen):
    while st.step < 3:
        gen.report(loss=0.0)
    return (gen.rank, gen.world)
r = elastic_agent.run(st, fn, backend=SoloBackend())
print(st.step, r)
"""


def test_without_an_agent_the_program_runs_alone():
    env = {k: v for k, v in os.environ.items() if not k.startswith("EA_")}
    out = subprocess.run([sys.executable, "-c", ALONE_PROG], env=dict(env, PYTHONPATH=PYDIR),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3 (0, 1)"
