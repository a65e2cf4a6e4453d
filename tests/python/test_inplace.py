"""In-place re-formation with torch.distributed (gloo on 127.0.0.1), driven by
a fake agent written here: the test plays the agent of three, then four worker
processes of tests/python/torch_worker.py (a DDP model).

What it asserts, as the issue's end-to-end test does with real agents:

* SIGKILL of one worker → both survivors report ``failed`` (the step in flight
  not applied) and continue at world 2 **in the same processes** (same pids,
  same sockets, no second hello) from the step they had reached;
* a joiner is taken in and receives the state (its first step is the
  survivors' step, its digest theirs);
* a frozen (SIGSTOPped) peer: the others answer PREPARE within a fraction of
  the collective timeout (the library aborts gloo by shutting its sockets);
* after every step all ranks of a generation report bit-identical parameter
  digests; across generations no step is lost or repeated;
* checkpoints: each rank stages its 1/W byte range; the ranges of one step
  tile a state that parses, loads and has the digest the ranks reported; a
  cold start of two fresh workers from it (``resume: latest``) continues at
  that step with that digest;
* STOP → ``exiting`` 0 and exit status 0;
* the flat gradient allreduce (``gen.allreduce_gradients``) follows DDP's
  trajectory (the cold-started pair uses it).
"""
from __future__ import annotations

import os
import select
import signal
import time
from typing import Dict, List

import pytest

torch = pytest.importorskip("torch")

from ckpt_util import tensor_lines, write_checkpoint  # noqa: E402
from conftest import FakeAgent  # noqa: E402
from elastic_agent.layout import parse_header, split_range  # noqa: E402
from elastic_agent.xxh3 import xxh3_64  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")
TIMEOUT_MS = 6000  # the collective timeout of every COMMIT here


class Cluster:
    """The fake agents of several workers, pumped together."""

    def __init__(self, procs) -> None:
        self.procs = procs
        self.agents: List[FakeAgent] = []
        self.p: List = []
        self.cursor: Dict[int, int] = {}

    def spawn(self, env=None, script: str = WORKER) -> int:
        a = FakeAgent()
        p = self.procs.start(script, [], dict(env or {}), a)
        self.agents.append(a)
        self.p.append(p)
        self.cursor[len(self.agents) - 1] = 0
        return len(self.agents) - 1

    def pump(self, until, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
            socks = {a.sock: a for a in self.agents if a.sock.fileno() >= 0}
            r, _, _ = select.select(list(socks), [], [], 0.05)
            for s in r:
                a = socks[s]
                try:
                    m, fd = a.recv(0)
                except (TimeoutError, BlockingIOError):
                    continue
                except Exception as e:  # the worker died: its socket closed
                    a.log.append({"type": "_gone", "why": str(e)})
                    a.sock.close()
                    continue
                if fd is not None:
                    m["_data"] = os.pread(fd, m.get("length", 0) + 1, 0)
                    os.close(fd)
                if m["type"] == "ckpt_staged":  # written at once, as far as the worker can tell
                    a.send(type="ckpt_done", gen=m["gen"], step=m["step"], status=0, message="")

    def take(self, i: int, type_: str, timeout: float = 20.0) -> dict:
        """The next message of type_ from worker i (others are kept in the log)."""
        found: List[dict] = []

        def look() -> bool:
            log = self.agents[i].log
            for k in range(self.cursor[i], len(log)):
                if log[k]["type"] == type_:
                    self.cursor[i] = k + 1
                    found.append(log[k])
                    return True
                if log[k]["type"] in ("exiting", "_gone") and type_ not in ("exiting", "_gone"):
                    raise AssertionError("worker %d: %r while waiting for %s" % (i, log[k], type_))
            return False
        self.pump(look, timeout, "%s from worker %d" % (type_, i))
        return found[0]

    def steps(self, i: int, gen: int) -> List[dict]:
        return [m for m in self.agents[i].log if m["type"] == "step" and m["gen"] == gen]

    def send(self, i: int, **msg) -> None:
        self.agents[i].send(**msg)

    def form(self, gen: int, members: List[int], ready_from=None, **extra) -> Dict[int, dict]:
        """PREPARE (now) → READY from each member → COMMIT, as the agent does."""
        for i in members:
            self.send(i, type="prepare", gen=gen, at_boundary=False)
        ready = {i: self.take(i, "ready") for i in members}
        for i in members:
            assert ready[i]["gen"] == gen
        root = max(range(len(members)), key=lambda r: (ready[members[r]]["next_step"], -r))
        peers = [ready[i]["comm_addr"] for i in members]
        for r, i in enumerate(members):
            self.send(i, type="commit", gen=gen, rank=r, world=len(members), peers=peers,
                      sync_root=root, backend="tcp", timeout_ms=TIMEOUT_MS, **extra)
        return ready

    def close(self) -> None:
        for a in self.agents:
            a.close()


def _digests_agree(c: Cluster, members: List[int], gen: int) -> int:
    """Every step of gen reported by every member carries one digest; returns
    how many steps were compared."""
    by_step: Dict[int, set] = {}
    for i in members:
        for m in c.steps(i, gen):
            by_step.setdefault(m["step"], set()).add(m["digest"])
    for s, ds in by_step.items():
        assert len(ds) == 1, "gen %d step %d: digests differ across ranks: %s" % (gen, s, ds)
    return len(by_step)


def _reached(c: Cluster, members: List[int], gen: int, n: int):
    def done() -> bool:
        for i in members:
            bad = [m for m in c.agents[i].log if m["type"] in ("exiting", "_gone", "failed")
                   and m.get("gen", gen) == gen]
            assert not bad, "worker %d: %r" % (i, bad[0])
        return all(len(c.steps(i, gen)) >= n for i in members)
    return done


def test_in_place_kill_join_freeze_checkpoint_and_cold_start(procs, tmp_path):
    c = Cluster(procs)
    try:
        for _ in range(3):
            c.spawn()
        hellos = [c.take(i, "hello", timeout=60) for i in range(3)]
        assert [h["pid"] for h in hellos] == [p.pid for p in c.p]
        assert len({h["digest"] for h in hellos}) == 1  # same seed, same model

        # ---- generation 1: world 3, checkpoints every 4 steps ------------------
        c.form(1, [0, 1, 2], ckpt_interval=4, ckpt_dir=str(tmp_path / "ck"))
        c.pump(_reached(c, [0, 1, 2], 1, 9), 30, "9 steps at world 3")
        staged = {}  # step -> rank -> message (the pump answered each with ckpt_done)
        for i in range(3):
            for m in c.agents[i].log:
                if m["type"] == "ckpt_staged":
                    staged.setdefault(m["step"], {})[m["rank"]] = m
        assert not any(m["type"] == "ckpt_skipped" for i in range(3) for m in c.agents[i].log)

        # ---- SIGKILL rank 2: survivors fail and continue in place -------------
        t_kill = time.monotonic()
        os.kill(c.p[2].pid, signal.SIGKILL)
        failed = {i: c.take(i, "failed") for i in (0, 1)}
        kill_to_failed = time.monotonic() - t_kill
        for i in (0, 1):
            last = c.steps(i, 1)[-1]["step"]
            assert failed[i]["gen"] == 1 and failed[i]["next_step"] == last + 1  # nothing applied after
            assert failed[i]["error"] < 0
        ns = [failed[i]["next_step"] for i in (0, 1)]
        assert abs(ns[0] - ns[1]) <= 1
        t_commit = time.monotonic()
        ready = c.form(2, [0, 1])
        assert [ready[i]["next_step"] for i in (0, 1)] == ns
        assert [ready[i]["comm_addr"] for i in (0, 1)] == [hellos[i]["comm_addr"] for i in (0, 1)]
        c.pump(_reached(c, [0, 1], 2, 1), 30, "the first step at world 2")
        commit_to_step = time.monotonic() - t_commit
        firsts = [c.steps(i, 2)[0]["step"] for i in (0, 1)]
        assert firsts == [max(ns)] * 2  # continue where the furthest rank was
        c.pump(_reached(c, [0, 1], 2, 8), 30, "8 steps at world 2")
        assert all(c.p[i].poll() is None for i in (0, 1))
        assert [m["type"] for m in c.agents[0].log].count("hello") == 1

        # ---- a joiner receives the state -------------------------------------
        j = c.spawn(env={"EA_TEST_INIT_SEED": "999"})  # its own init: it must take the state
        hj = c.take(j, "hello", timeout=60)
        assert hj["digest"] != hellos[0]["digest"]
        c.form(3, [0, 1, j])
        c.pump(_reached(c, [0, 1, j], 3, 6), 30, "6 steps at world 3 with the joiner")
        first3 = {i: c.steps(i, 3)[0] for i in (0, 1, j)}
        assert len({m["step"] for m in first3.values()}) == 1
        assert first3[j]["step"] == max(m["step"] for i in (0, 1) for m in c.steps(i, 2)) + 1

        # ---- freeze rank 1: the others are aborted out of gloo at once --------
        os.kill(c.p[1].pid, signal.SIGSTOP)
        t_prep = time.monotonic()
        for i in (0, j):
            c.send(i, type="prepare", gen=4, at_boundary=False)
        r4 = {i: c.take(i, "ready") for i in (0, j)}
        prepare_to_ready = time.monotonic() - t_prep
        assert prepare_to_ready < TIMEOUT_MS / 1000 / 2, "not aborted: %.2f s" % prepare_to_ready
        os.kill(c.p[1].pid, signal.SIGKILL)
        peers = [r4[0]["comm_addr"], r4[j]["comm_addr"]]
        root = 0 if r4[0]["next_step"] >= r4[j]["next_step"] else 1
        for r, i in enumerate((0, j)):
            c.send(i, type="commit", gen=4, rank=r, world=2, peers=peers, sync_root=root,
                   backend="tcp", timeout_ms=TIMEOUT_MS)
        c.pump(_reached(c, [0, j], 4, 5), 30, "5 steps at world 2 after the freeze")
        assert c.steps(0, 4)[0]["step"] == max(r4[0]["next_step"], r4[j]["next_step"])

        # ---- every step: one digest per step; no step lost or repeated --------
        members = {1: [0, 1, 2], 2: [0, 1], 3: [0, 1, j], 4: [0, j]}
        for g, mem in members.items():
            assert _digests_agree(c, mem, g) > 0
        expect = 0
        for g in (1, 2, 3, 4):
            got = sorted({m["step"] for i in members[g] for m in c.steps(i, g)})
            assert got == list(range(expect, expect + len(got))), "gen %d: steps %s" % (g, got)
            for i in members[g]:  # each rank's own reports are contiguous within a generation
                s = [m["step"] for m in c.steps(i, g)]
                assert s == list(range(s[0], s[0] + len(s)))
            expect = got[-1] + 1

        # ---- the checkpoints of gen 1 tile states with the reported digests --
        full = [s for s, by in staged.items() if len(by) == 3]
        assert full, "no checkpoint staged by all three ranks: %s" % staged
        s = full[0]
        total = staged[s][0]["total"]
        state = b""
        for r in range(3):
            m = staged[s][r]
            assert (m["offset"], m["offset"] + m["length"]) == split_range(total, 3, r)
            assert m["hash"] == xxh3_64(m["_data"][:m["length"]]) and m["total"] == total
            assert m["layout"] == "ea-state-1"
            state += m["_data"][:m["length"]]
        specs, h, t = parse_header(state)
        assert t == total and h == staged[s][0]["header_bytes"]
        assert [x.name for x in specs][:4] == ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
        digest_at = {m["step"]: m["digest"] for m in c.steps(0, 1)}
        probe = _probe()  # the worker's state, built here: the staged bytes load into it
        probe.load(state, "staged step %d" % s)
        assert probe.step == s and probe.params_digest() == digest_at[s - 1]

        # ---- STOP: exiting 0, exit status 0 -----------------------------------
        for i in (0, j):
            c.send(i, type="stop")
            assert c.take(i, "exiting") == {"type": "exiting", "reason": "stop", "code": 0}
        for i in (0, j):
            assert c.p[i].wait(20) == 0

        # ---- cold start of two new workers from that checkpoint ---------------
        d = str(tmp_path / "ck")
        write_checkpoint(d, s, 1, state, world=3, tensors=tensor_lines(state))
        c2 = Cluster(procs)
        try:
            for _ in range(2):  # these use the flat gradient allreduce instead of DDP
                c2.spawn(env={"EA_TEST_MODE": "flat"})
            for i in range(2):
                c2.take(i, "hello", timeout=60)
            c2.form(7, [0, 1], ckpt_dir=d, resume="latest")
            loaded = c2.take(0, "ckpt_loaded")
            assert (loaded["step"], loaded["name"], loaded["digest"]) == (s, "step-%d.gen-1" % s, digest_at[s - 1])
            assert loaded["fallbacks"] == 0
            c2.pump(_reached(c2, [0, 1], 7, 3), 30, "3 steps after the cold start")
            assert [c2.steps(i, 7)[0]["step"] for i in (0, 1)] == [s, s]
            assert _digests_agree(c2, [0, 1], 7) >= 3
            # trajectory: the steps after the checkpoint, at world 2 with the flat
            # allreduce, have gen 1's world-3 DDP losses up to float summation order
            loss1 = {m["step"]: m["loss"] for m in c.steps(0, 1)}
            loss7 = {m["step"]: m["loss"] for m in c2.steps(0, 7)}
            both = [k for k in loss7 if k in loss1]
            assert both, "no step computed by both runs"
            for k in both:
                # under DDP each rank reports its part of the loss, the flat
                # allreduce gives every rank the global sum
                l1 = sum(m["loss"] for i in (0, 1, 2) for m in c.steps(i, 1) if m["step"] == k)
                l7 = {m["loss"] for i in (0, 1) for m in c2.steps(i, 7) if m["step"] == k}
                assert len(l7) == 1, l7
                assert abs(l1 - l7.pop()) <= 1e-5 * max(1.0, abs(l1)), (k, l1)
            for i in (0, 1):
                c2.send(i, type="stop")
                c2.take(i, "exiting")
        finally:
            c2.close()
        print("\n  SIGKILL -> failed on both survivors: %.1f ms" % (kill_to_failed * 1e3))
        print("  COMMIT (world 2) -> first step: %.1f ms" % (commit_to_step * 1e3))
        print("  PREPARE -> READY with a frozen peer (timeout %d ms): %.1f ms" % (TIMEOUT_MS, prepare_to_ready * 1e3))
    finally:
        c.close()


def _probe():
    from elastic_agent.torch import TorchState
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return TorchState(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
                      samples_seen=0)
