"""The generation loop: a user's program as a worker of the agent.

This is train/worker.c in Python, for a program whose step loop is the
user's.  Two threads, as there: the program's thread runs the user's loop,
forms each generation's process group, syncs the state and sends every
message, so replies leave in the order things happened; a reader thread only
reads the agent's packets and turns them into flags under one lock — with the
one exception that is the reason it exists: a PREPARE that says "now" (a rank
died), a PAUSE, a STOP, a newer COMMIT or a SIGTERM calls the backend's
``abort()`` at once, so a collective stuck on a dead or frozen peer returns
within milliseconds instead of waiting out the timeout.

The user's loop runs once per generation, inside ``with gen:`` (which
:func:`run` writes for you).  It ends in one of four ways:

* it returns: training is over; the worker says ``done`` and waits for STOP
  (or a new generation that still needs its state, e.g. a joiner);
* :class:`Interrupted` out of :meth:`Generation.report` — the agent wants a
  new generation, a pause or a stop, and the step just reported was the last
  one of this generation;
* a collective fails (a peer died, a timeout, our own abort): the step in
  flight was not applied, so the state is the last reported step; the worker
  says ``failed`` (unless the agent already moved on) and waits;
* anything else is the program's own error: the worker says ``exiting`` with
  code 1 and the exception propagates.

Every generation starts with a state sync, as in the built-in worker: one
small MAX-allreduce tells every rank the highest and lowest step, whether all
state digests and model signatures agree and which rank holds the most
steps (the COMMIT's sync_root on ties); every rank takes the same decision
from the same numbers — nothing to do, broadcast from that rank, or fail —
so no rank waits on a broadcast nobody sends.
"""
from __future__ import annotations

import errno
import logging
import math
import os
import random
import select
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, TypeVar

from . import checkpoint as ckpt
from . import _protocol as protocol
from ._connection import AgentConnection
from .errors import AgentGone, CheckpointError, CommError, ProtocolError, StateError
from .layout import split_range
from ._staging import Stager
from .state import State

__all__ = ["Interrupted", "Backend", "SoloBackend", "Generation", "Worker", "run", "generations"]

log = logging.getLogger("elastic_agent")

F = TypeVar("F", bound=Callable[..., Any])

#: Where COMMIT timeout_ms is 0 (the agent always sends one; standalone runs).
DEFAULT_TIMEOUT_MS = 60000


class Interrupted(BaseException):
    """Raised out of :meth:`Generation.report` when the agent wants something
    else — a new generation, a pause, a stop.  It derives from BaseException
    (like KeyboardInterrupt) so that a program's ``except Exception`` does not
    swallow it; :func:`run` and ``with gen:`` handle it."""


def _clip(s: str, n: int = protocol.TEXT_MAX - 1) -> str:
    b = s.encode("utf-8", "surrogateescape")
    if len(b) <= n:
        return s
    return b[:n].decode("utf-8", "ignore")


def _i64(u: int) -> int:
    """A u64 digest as the int64 a MAX-allreduce carries."""
    return u - (1 << 64) if u >= (1 << 63) else u


# ---- backends -------------------------------------------------------------------


class Backend:
    """What the loop needs from a communication library (torch.distributed
    in :mod:`elastic_agent.torch`).  Every method but :meth:`abort` is called
    from the program's thread only."""

    name = "?"
    #: The generation of the group in use or being formed, None when none.
    gen: Optional[int] = None

    def start(self, bind: str, local_rank: int) -> str:
        """Once, before hello: bind what peers will reach (the rendezvous
        store) and return that ``host:port`` (the hello's comm_addr)."""
        raise NotImplementedError

    def form(self, plan: Mapping[str, Any]) -> None:
        """Form the group of a COMMIT.  Bounded by the plan's timeout_ms;
        raises CommError (or the library's own error) when it cannot."""
        raise NotImplementedError

    def abort(self) -> None:
        """From any thread: make every in-flight and later collective of the
        current group (or of the one being formed) fail at once.  Cleared by
        :meth:`teardown`."""
        raise NotImplementedError

    def teardown(self) -> None:
        """Free the current group, if any, so that peers see it gone at once."""
        raise NotImplementedError

    def allreduce_max(self, values: list) -> list:
        """Element-wise MAX of int64 values over the group."""
        raise NotImplementedError

    def broadcast(self, data: Optional[bytearray], root: int, size: Optional[int] = None) -> bytearray:
        """``root``'s bytes on every rank (``data`` is None elsewhere).  With
        ``size`` (every rank passes the same, at least the root's length) no
        length is exchanged first: the root's bytes arrive zero-padded to
        ``size``."""
        raise NotImplementedError

    def comm_error(self, exc: BaseException) -> Optional[CommError]:
        """The CommError an exception of the communication library means, or
        None if it is not one (the program's own error)."""
        return exc if isinstance(exc, CommError) else None

    def make_generation(self, worker: "Worker", plan: Mapping[str, Any], sync: str) -> "Generation":
        return Generation(worker, plan, sync)

    def close(self) -> None:
        """At the end of the worker."""


class SoloBackend(Backend):
    """World 1 without any communication library: for programs that need no
    collectives (an ObjectState program, tests, a run without the agent)."""

    name = "solo"

    def __init__(self) -> None:
        self._aborted = False

    def start(self, bind: str, local_rank: int) -> str:
        host = bind.rsplit(":", 1)[0] if ":" in bind else bind
        return "%s:%d" % (host or "127.0.0.1", os.getpid() % 50000 + 10000)

    def form(self, plan: Mapping[str, Any]) -> None:
        if plan["world"] != 1:
            raise CommError("the solo backend forms world 1 only, not %d" % plan["world"], errno.EINVAL)
        self.gen = plan["gen"]
        if self._aborted:
            raise CommError("aborted", errno.ECANCELED)

    def abort(self) -> None:
        self._aborted = True

    def teardown(self) -> None:
        self._aborted = False
        self.gen = None

    def allreduce_max(self, values: list) -> list:
        if self._aborted:
            raise CommError("aborted", errno.ECANCELED)
        return list(values)

    def broadcast(self, data: Optional[bytearray], root: int, size: Optional[int] = None) -> bytearray:
        if self._aborted:
            raise CommError("aborted", errno.ECANCELED)
        assert data is not None
        return data


# ---- a generation, as the program sees it -----------------------------------------


class Generation:
    """One generation of the worker group, handed to the program's loop.

    ``gen`` (its number), ``rank``, ``world``, ``sync_root``, ``local_rank``,
    ``state``, and ``sync`` (how this rank got its state: "in-sync", "sent",
    "received" or "loaded").  The torch backend adds the process group and
    helpers (:class:`elastic_agent.torch.TorchGeneration`).
    """

    def __init__(self, worker: "Worker", plan: Mapping[str, Any], sync: str) -> None:
        self._worker = worker
        self.gen: int = plan["gen"]
        self.rank: int = plan["rank"]
        self.world: int = plan["world"]
        self.sync_root: int = plan["sync_root"]
        self.local_rank: int = worker.local_rank
        self.state: State = worker.state
        self.sync = sync
        self._samples = 0
        self._last = time.monotonic()
        self._open = True
        # where its re-formation's time went, set at its first report:
        # epoch seconds of last_step (the previous generation's last report),
        # prepare, ready, commit, destroyed, formed, synced, first_step
        self.timing: Optional[Dict[str, float]] = None
        self._outcome: Optional[str] = None  # done | interrupted | failed
        self._error: Optional[CommError] = None

    def __repr__(self) -> str:
        return "<Generation %d rank %d/%d step %d>" % (self.gen, self.rank, self.world, self.state.step)

    # ---- data ------------------------------------------------------------------

    def shard(self, global_batch: int) -> range:
        """This rank's slice of a fixed global batch: ``range(⌊rB/W⌋,
        ⌊(r+1)B/W⌋)`` — positions 0…B-1 within the step's batch, covered once
        by the W ranks, as the built-in trainer splits it.  Its length is the
        ``samples`` of the next report."""
        lo, hi = split_range(global_batch, self.world, self.rank)
        self._samples = hi - lo
        return range(lo, hi)

    def samples(self, global_batch: int, step: Optional[int] = None) -> range:
        """The global sample indices of this rank at ``step`` (default: the
        step about to be computed): ``range(s·B + ⌊rB/W⌋, s·B + ⌊(r+1)B/W⌋)``."""
        s = self.state.step if step is None else step
        r = self.shard(global_batch)
        return range(s * global_batch + r.start, s * global_batch + r.stop)

    # ---- progress --------------------------------------------------------------

    @property
    def interrupted(self) -> bool:
        """True when the agent wants a new generation, a pause or a stop: the
        next :meth:`report` raises :class:`Interrupted`."""
        return self._worker._interrupted()

    def report(self, loss: Any, *, step_time: Optional[float] = None,
               compute_time: Optional[float] = None, grad_norm: Optional[float] = None,
               samples: Optional[int] = None) -> None:
        """The step is complete on this rank and applied: count it
        (``state.step += 1``), tell the agent (loss, digest of the
        parameters, samples, seconds), stage a checkpoint if one is due, and
        raise :class:`Interrupted` if the agent wants something else now.

        ``loss`` is a number or a one-element tensor (the global loss if you
        have it); ``step_time`` defaults to the time since the previous
        report (or the generation's start); ``samples`` to the length of the
        last :meth:`shard`.  Raises RuntimeError outside its generation."""
        if not self._open:
            raise RuntimeError("report(): generation %d is over" % self.gen)
        now = time.monotonic()
        secs = now - self._last if step_time is None else float(step_time)
        self._last = now
        self._worker._report(self, float(loss), secs, compute_time, grad_norm,
                             self._samples if samples is None else int(samples))

    # ---- with gen: --------------------------------------------------------------

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, et, exc, tb) -> bool:
        self._open = False
        return self._worker._end_of(self, exc)


# ---- the worker ------------------------------------------------------------------


class Worker:
    """The loop (see the module's docstring).

    ``state``: the training state; ``backend``: a :class:`Backend` (default:
    the state's own, e.g. torch.distributed for a TorchState); ``conn``: the
    agent connection (default: ``EA_IPC_FD``; without one the program runs
    alone at world 1, which is handy for development); ``digest_every``: put
    the parameters' digest into every N-th step report (0: never; hashing
    is ~0.1 ms per MB); ``stop_grace``: after STOP, SIGTERM or
    the agent's end of the socket closing, how long the program's thread may
    take to come out of the aborted collective before the process exits
    anyway (0: wait for ever).
    """

    def __init__(self, state: State, backend: Optional[Backend] = None, *,
                 conn: Optional[AgentConnection] = None, digest_every: int = 1,
                 handle_sigterm: bool = True, stop_grace: float = 3.0,
                 environ: Optional[Mapping[str, str]] = None) -> None:
        self.state = state
        env = os.environ if environ is None else environ
        self._env = env
        self.backend: Backend = backend if backend is not None else getattr(
            state, "default_backend", lambda: SoloBackend())()
        self._conn = conn
        self._conn_from_env = conn is None
        self.local_rank = int(env.get("EA_LOCAL_RANK") or 0)
        self._bind = env.get("EA_COMM_BIND") or "127.0.0.1:0"
        self.digest_every = digest_every
        self._handle_sigterm = handle_sigterm
        self.comm_addr = ""

        self._mu = threading.RLock()
        self._cv = threading.Condition(self._mu)
        # ---- under _mu ----
        self._stop = False
        self._agent_gone = False
        self._sigterm = False
        self._pause = False
        self._prepare: Optional[Tuple[int, bool]] = None
        self._commit: Optional[Dict[str, Any]] = None
        self._max_gen = 0
        self._ckpt_inflight: Optional[int] = None
        # ckpt_at: (gen, step) to stage after, the last moment before a mass preemption
        self._ckpt_at: Optional[Tuple[int, int]] = None
        # ---- program thread only ----
        self._training = False
        self._plan: Optional[Dict[str, Any]] = None
        self.gen = 0
        self.rank = 0
        self.world = 1
        self._ckpt_interval = 0
        self._ckpt_skip = False
        self._op_timeout_ms = DEFAULT_TIMEOUT_MS
        self._ckpt_skipped = 0
        self._stager = Stager()
        self._sync_how = "in-sync"
        self._loaded_now = False  # this generation's sync root loaded a checkpoint (_resume)
        self._result: Any = None
        self._reader: Optional[threading.Thread] = None
        self._wake_r = self._wake_w = -1
        self._old_wakeup = None
        self._old_sigterm: Any = None
        self._started = False
        self.stop_grace = stop_grace
        self._watchdog: Optional[threading.Timer] = None
        self._stop_handled = False
        self._warned_nan = False
        # Where a re-formation's time goes (wall-clock seconds, time.time()):
        # the reader thread stamps PREPARE and COMMIT as they arrive, the
        # program thread the rest; logged and kept as Generation.timing at
        # the generation's first report (docs/pytorch.md, "join stall").
        self._t_prepare = self._t_commit = self._t_ready = self._t_step = 0.0
        self._timing: Optional[Dict[str, float]] = None

    # ---- messages --------------------------------------------------------------

    def _send(self, msg: Dict[str, Any], fd: Optional[int] = None) -> bool:
        if self._conn is None:
            return False
        try:
            self._conn.send(msg, fd)
            return True
        except AgentGone as e:
            log.info("%s", e)
            self._gone()
        return False

    def _gone(self) -> None:
        with self._cv:
            self._stop = True
            self._agent_gone = True
            self.backend.abort()
            self._arm_stop_watchdog()
            self._cv.notify_all()

    def _arm_stop_watchdog(self) -> None:
        """Caller holds _mu.  The process must go: if the program's thread is
        still inside the aborted collective after ``stop_grace`` seconds
        (gloo can lose a send and wait out its timeout; see elastic_agent.torch),
        end the process from here, saying so."""
        if self._watchdog is not None or not self.stop_grace:
            return
        self._watchdog = threading.Timer(self.stop_grace, self._stop_deadline)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _stop_deadline(self) -> None:
        with self._mu:
            if self._stop_handled:
                return
            self._stop_handled = True
            gone, term = self._agent_gone, self._sigterm or _sigterm_seen[0]
        code = 1 if gone else (143 if term else 0)
        log.warning("the program did not return within %.1f s of the abort (stuck in a collective?): "
                    "exiting with %d", self.stop_grace, code)
        if not gone:
            self._send({"type": "exiting", "reason": _clip("%s: the program did not return within %.1f s"
                                                          % ("SIGTERM" if term else "stop", self.stop_grace)),
                        "code": code})
        os._exit(code)

    # ---- the reader thread -------------------------------------------------------

    def _on_packet(self, m: Dict[str, Any]) -> None:
        t = m["type"]
        with self._cv:
            if t == "prepare":
                if m["gen"] < self._max_gen:
                    log.info("ignoring prepare gen=%d: gen %d already announced", m["gen"], self._max_gen)
                else:
                    self._max_gen = m["gen"]
                    self._t_prepare = time.time()
                    self._prepare = (m["gen"], bool(m.get("make_nccl_id", False)))
                    if self._commit is not None and self._commit["gen"] < m["gen"]:
                        self._commit = None
                    if not m["at_boundary"]:
                        self.backend.abort()
            elif t == "commit":
                if m["gen"] < self._max_gen:
                    log.info("ignoring commit gen=%d: gen %d already announced", m["gen"], self._max_gen)
                else:
                    self._max_gen = m["gen"]
                    self._t_commit = time.time()
                    self._commit = m
                    g = self.backend.gen
                    if g is not None and g < m["gen"]:
                        self.backend.abort()  # a running group of an older generation is superseded
            elif t == "pause":
                log.info("pause: %s", m["reason"])
                self._pause = True
                self.backend.abort()
            elif t == "stop":
                self._stop = True
                self.backend.abort()
                self._arm_stop_watchdog()
            elif t == "ckpt_at":
                log.info("ckpt_at gen=%d step=%d: staging then", m["gen"], m["step"])
                self._ckpt_at = (m["gen"], m["step"])
            elif t == "ckpt_done":
                if self._ckpt_inflight is None or m["step"] != self._ckpt_inflight:
                    log.warning("ckpt_done for step %d with none in flight, ignored", m["step"])
                else:
                    self._ckpt_inflight = None
                    if m["status"]:
                        log.warning("checkpoint of step %d failed in the agent: %s", m["step"], m["message"])
            else:
                log.warning("unexpected %s from the agent, ignored", t)
            self._cv.notify_all()

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGTERM:
            log.info("SIGTERM: stopping")
            with self._cv:
                self._stop = True
                self._sigterm = True
                self.backend.abort()
                self._arm_stop_watchdog()
                self._cv.notify_all()

    def _read_loop(self) -> None:
        assert self._conn is not None
        sock = self._conn.sock
        while True:
            try:
                ready, _, _ = select.select([sock, self._wake_r], [], [])
            except InterruptedError:
                continue
            if self._wake_r in ready:
                data = os.read(self._wake_r, 64)
                if b"q" in data:
                    return
                for b in data:
                    self._on_signal(b)
                continue
            try:
                msg, fd = self._conn.recv(timeout=0)
            except TimeoutError:
                continue
            except ProtocolError as e:
                log.warning("bad packet from the agent dropped: %s", e)
                continue
            except (AgentGone, OSError) as e:
                log.info("agent connection: %s", e)
                self._gone()
                return
            if fd is not None:
                os.close(fd)
            self._on_packet(msg)

    # ---- the program thread --------------------------------------------------------

    def _interrupted(self) -> bool:
        with self._mu:
            return self._stop or self._pause or self._prepare is not None or self._commit is not None

    def _teardown(self) -> None:
        self.backend.teardown()
        self._training = False

    def _fail(self, gen: int, err: CommError, what: str) -> None:
        self._teardown()
        if self._interrupted():
            log.info("gen=%d %s: %s (superseded by the agent)", gen, what, err)
            return
        log.warning("gen=%d %s: %s", gen, what, err)
        msg = {"type": "failed", "gen": gen, "error": -(err.errno or errno.EIO),
               "message": _clip("%s: %s" % (what, err)), "next_step": self.state.step}
        if err.peer is not None:
            msg["peer"] = err.peer
        self._send(msg)

    def _classify(self, exc: BaseException) -> Optional[CommError]:
        ce = self.backend.comm_error(exc)
        if ce is not None:
            return ce
        if isinstance(exc, Exception) and self._interrupted():
            # whatever our own abort made the library raise
            return CommError("%s: %s" % (type(exc).__name__, exc), errno.ECANCELED)
        return None

    def _do_prepare(self, gen: int, nccl: bool) -> None:
        self._teardown()
        msg = {"type": "ready", "gen": gen, "comm_addr": self.comm_addr,
               "next_step": self.state.step, "digest": self.state.params_digest()}
        if nccl:
            # torch's NCCL makes its own unique id through the store; the
            # agent asks rank 0 for one only because its built-in nccl does.
            msg["nccl_id"] = bytes(protocol.NCCL_ID_BYTES)
        # Stamped before it leaves: the COMMIT it allows may come back (and be
        # stamped by the reader) before this thread runs again.
        self._t_ready = time.time()
        self._send(msg)

    def _do_commit(self, plan: Dict[str, Any]) -> None:
        with self._mu:
            tm = {"last_step": self._t_step, "prepare": self._t_prepare, "ready": self._t_ready,
                  "commit": self._t_commit}
        self._timing = None
        self._teardown()
        tm["destroyed"] = time.time()
        self._plan = plan
        self.gen, self.rank, self.world = plan["gen"], plan["rank"], plan["world"]
        self._ckpt_interval = plan.get("ckpt_interval", 0)
        self._ckpt_skip = plan.get("ckpt_busy") == "skip"
        self._op_timeout_ms = plan["timeout_ms"] or DEFAULT_TIMEOUT_MS
        if self._ckpt_interval:
            with self._mu:
                busy = self._ckpt_inflight is not None
            if not busy:  # pre-size the staging buffer now, outside any stall
                try:
                    total = self.state.flat().total
                    lo, hi = split_range(total, self.world, self.rank)
                    self._stager.ensure(hi - lo)
                except (OSError, StateError) as e:
                    log.warning("staging memfd: %s", e)
        t0 = time.monotonic()
        try:
            self.backend.form(plan)
        except Exception as e:
            ce = self._classify(e) or CommError("%s: %s" % (type(e).__name__, e), errno.EIO)
            self._fail(plan["gen"], ce, "process group of rank %d/%d" % (plan["rank"], plan["world"]))
            return
        if self._interrupted():  # arrived while forming: the reader could not abort it yet
            self.backend.abort()
        t1 = time.monotonic()
        tm["formed"] = time.time()
        self._loaded_now = False
        if plan.get("resume") and plan["rank"] == plan["sync_root"] and not self._resume(plan):
            return
        try:
            how = self._sync_state(plan)
        except Exception as e:
            ce = self._classify(e) or CommError("%s: %s" % (type(e).__name__, e), errno.EIO)
            self._fail(plan["gen"], ce, "state sync")
            return
        if self._sync_how == "loaded" and how == "sent":
            how = "loaded"
        log.info("gen=%d rank=%d world=%d step=%d form_ms=%.1f sync_ms=%.1f sync=%s backend=%s",
                 plan["gen"], plan["rank"], plan["world"], self.state.step, (t1 - t0) * 1e3,
                 (time.monotonic() - t1) * 1e3, how, self.backend.name)
        self._sync_how = how
        tm["synced"] = time.time()
        self._timing = tm
        self._training = True

    def _sync_state(self, plan: Mapping[str, Any]) -> str:
        """The generation's first collectives: agree on one state (see the
        module's docstring).  Slots of the MAX-allreduce (int64; ~x turns a
        MAX into a MIN): 0 step, 1 ~step, 2 digest, 3 ~digest, 4 signature,
        5 ~signature, 6 the root key: step·2²¹ + 2²⁰·[rank is sync_root] +
        (2²⁰-1-rank), whose maximum names the lowest rank among those with
        the most steps, the COMMIT's sync_root first, 7 the flat state's
        size (the broadcast is that long: no length goes first; a root whose
        state is shorter pads it, and the receivers' load reads the header's
        own length)."""
        st, rank, world = self.state, plan["rank"], plan["world"]
        if world >= (1 << 20):
            raise CommError("world %d: more than 2^20 ranks" % world, errno.EINVAL)
        step, dig, sig = st.step, _i64(st.sync_digest()), _i64(st.signature())
        key = (step << 21) | ((1 << 20) if rank == plan["sync_root"] else 0) | ((1 << 20) - 1 - rank)
        if rank == plan["sync_root"] and self._loaded_now:
            # It loaded the plan's checkpoint just now: its state is the
            # plan's choice, even over a left-behind live state with more
            # steps elsewhere (see _resume).
            key |= 1 << 62
        v = self.backend.allreduce_max([step, ~step, dig, ~dig, sig, ~sig, key, st.flat().total])
        root = (1 << 20) - 1 - (v[6] & ((1 << 20) - 1))
        if v[4] != ~v[5]:
            # Another model somewhere: every rank fails; the non-roots say
            # which tensor differs from the root's.
            lines = "\n".join(st.signature_lines()).encode()
            theirs = self.backend.broadcast(bytearray(lines) if rank == root else None, root)
            if rank == root:
                raise CommError("state sync: ranks hold different models (tensor tables differ; "
                                "the other ranks' messages name the tensor)", errno.EPROTO)
            raise CommError("state sync: this rank's model differs from rank %d's: %s"
                            % (root, _first_difference(st.signature_lines(), bytes(theirs).decode().split("\n"))),
                            errno.EPROTO)
        if v[0] == ~v[1] and v[2] == ~v[3]:
            return "in-sync"
        data = st.flat().to_bytes() if rank == root else None
        buf = self.backend.broadcast(data, root, size=v[7])
        err: Optional[StateError] = None
        if rank != root:
            try:
                st.load(buf, "the state broadcast by rank %d" % root)
            except StateError as e:
                err = e
        d2 = _i64(st.sync_digest()) if err is None else _i64(random.getrandbits(64))
        chk = self.backend.allreduce_max([d2, ~d2])
        if chk[0] != ~chk[1]:
            raise CommError("state sync: digests differ after the broadcast from rank %d%s"
                            % (root, ": %s" % err if err else ""), errno.EPROTO)
        return "sent" if rank == root else "received"

    def _resume(self, plan: Mapping[str, Any]) -> bool:
        """The COMMIT names a checkpoint (the plan has no sync source): load
        it.  Normally this rank holds no state yet (a cold start); a live
        state here is one the agents left behind as older than the newest
        checkpoint, and the checkpoint replaces it.  False when the
        generation failed (reported)."""
        st = self.state
        if st.step != 0:
            log.info("the live state at step %d is older than the newest checkpoint "
                     "(the plan syncs from no rank): loading %s", st.step, plan["resume"])
        t0 = time.monotonic()
        d, spec = plan["ckpt_dir"], plan["resume"]
        try:
            r = ckpt.resolve(d, spec, full=plan.get("ckpt_verify", "full") != "size")
        except CheckpointError as e:
            self._fail(plan["gen"], CommError(str(e), errno.ENOENT), "resume")
            return False
        if r is None:
            log.info("no checkpoint in %s: starting at step 0", d)
            return True
        try:
            st.load(ckpt.read_state(r), "checkpoint %s" % r.name)
        except (CheckpointError, StateError) as e:
            self._fail(plan["gen"], CommError(str(e), errno.EPROTO), "resume from %s" % r.name)
            return False
        secs = time.monotonic() - t0
        if r.fallbacks:
            log.warning("alert: resume passed over %d damaged checkpoint(s) and loaded %s; first reason: %s",
                        r.fallbacks, r.name, r.why)
        log.info("resumed from %s/%s: step %d (written at world %d), %.1f ms", d, r.name, st.step,
                 r.manifest.world_size, secs * 1e3)
        self._sync_how = "loaded"
        self._loaded_now = True
        self._send({"type": "ckpt_loaded", "gen": plan["gen"], "step": st.step, "name": _clip(r.name),
                    "digest": st.params_digest(), "fallbacks": r.fallbacks, "message": _clip(r.why),
                    "seconds": secs})
        return True

    # ---- steps and checkpoints ---------------------------------------------------

    def _report(self, g: Generation, loss: float, secs: float, compute: Optional[float],
                grad_norm: Optional[float], samples: int) -> None:
        st = self.state
        step = st.step
        st.step += 1
        st._applied = False
        now = time.time()
        with self._mu:
            self._t_step = now
        tm = self._timing
        if tm is not None and "first_step" not in tm:
            tm["first_step"] = now
            g.timing = tm
            self._log_timing(g, tm)
        if not math.isfinite(loss) and not self._warned_nan:
            self._warned_nan = True  # the agent alerts on every such report
            log.warning("gen=%d step %d: the loss is %r", g.gen, step, loss)
        if self._conn is None:
            return
        every = self.digest_every
        digest = st.params_digest() if every and (step + 1) % every == 0 else 0
        msg: Dict[str, Any] = {"type": "step", "gen": g.gen, "step": step, "loss": loss,
                               "digest": digest, "samples": samples, "seconds": secs}
        if compute is not None:
            msg["compute_seconds"] = float(compute)
        if grad_norm is not None:
            msg["grad_norm"] = float(grad_norm)
        self._send(msg)
        self._maybe_checkpoint(st.step)
        if self._interrupted():
            raise Interrupted()

    @staticmethod
    def _log_timing(g: Generation, tm: Mapping[str, float]) -> None:
        """One line per generation: its stamps (epoch seconds) and the
        intervals between them (ms); a stamp of 0 was not taken (no PREPARE
        came before this COMMIT, no step before it)."""
        order = ("last_step", "prepare", "ready", "commit", "destroyed", "formed", "synced", "first_step")
        ms = []
        prev = None
        for k in order:
            if tm.get(k):
                if prev is not None:
                    ms.append("%s_ms=%.1f" % (k, (tm[k] - prev) * 1e3))
                prev = tm[k]
        log.info("gen=%d rank=%d world=%d sync=%s timing %s %s", g.gen, g.rank, g.world, g.sync,
                 " ".join("%s=%.6f" % (k, tm.get(k, 0.0)) for k in order), " ".join(ms))

    def _skip_ckpt(self, step: int, reason: str) -> None:
        self._ckpt_skipped += 1
        log.warning("checkpoint of step %d skipped: %s", step, reason)
        self._send({"type": "ckpt_skipped", "gen": self.gen, "step": step, "rank": self.rank,
                    "world": self.world, "reason": _clip(reason), "skipped": self._ckpt_skipped})

    def _maybe_checkpoint(self, step: int) -> None:
        """The state has just completed ``step`` steps: stage this rank's
        shard if a checkpoint is due (train/worker.c maybe_checkpoint):
        every ckpt_interval steps, and the step a ``ckpt_at`` names."""
        at = False
        with self._mu:
            want = self._ckpt_at
            if want is not None and (want[0] != self.gen or want[1] <= step):
                self._ckpt_at = None
        if want is not None and want[0] == self.gen and want[1] == step and self._ckpt_interval:
            at = True
        elif want is not None and (want[0] != self.gen or want[1] < step or not self._ckpt_interval):
            self._skip_ckpt(want[1], "ckpt_at names generation %d, this worker runs %d" % (want[0], self.gen)
                            if want[0] != self.gen else "checkpoints are off" if not self._ckpt_interval
                            else "step %d is already completed (at %d)" % (want[1], step))
        if not self._ckpt_interval or (step % self._ckpt_interval and not at):
            return
        t0 = time.monotonic()
        waited = 0.0
        skip_reason = None
        with self._cv:
            if self._ckpt_inflight is not None:
                prev = self._ckpt_inflight
                if self._ckpt_skip and not at:
                    skip_reason = "busy: step %d is still being written" % prev
                else:
                    # Busy policy "wait", but not past half the op timeout: the
                    # other ranks wait for this one in the next collective, and
                    # a wait as long as the timeout would fail the generation
                    # over a slow disk.
                    limit_ms = self._op_timeout_ms // 2
                    deadline = t0 + limit_ms / 1000.0
                    timed_out = False
                    while (self._ckpt_inflight is not None and not self._stop and not self._pause
                           and self._prepare is None and self._commit is None):
                        left = deadline - time.monotonic() if limit_ms else None
                        if left is not None and left <= 0:
                            timed_out = True
                            break
                        self._cv.wait(left)
                    if self._ckpt_inflight is not None:
                        skip_reason = ("busy: step %d still being written after %d ms" % (prev, limit_ms)
                                       if timed_out else "interrupted while waiting for step %d" % prev)
                    waited = time.monotonic() - t0
        if skip_reason is not None:
            self._skip_ckpt(step, skip_reason)
            return
        t1 = time.monotonic()
        try:
            flat = self.state.flat()
            lo, hi = split_range(flat.total, self.world, self.rank)
            h, _ = self._stager.stage(flat, lo, hi)
        except (OSError, StateError) as e:
            self._skip_ckpt(step, "staging: %s" % e)
            return
        stall = time.monotonic() - t1
        msg = {"type": "ckpt_staged", "gen": self.gen, "step": step, "rank": self.rank,
               "world": self.world, "offset": lo, "length": hi - lo, "total": flat.total,
               "hash": h, "stall_us": int(stall * 1e6), "wait_us": int(waited * 1e6),
               "skipped": self._ckpt_skipped, "layout": protocol.LAYOUT_EA_STATE_1,
               "header_bytes": flat.header_bytes}
        with self._mu:
            self._ckpt_inflight = step
        if not self._send(msg, self._stager.fd):
            with self._mu:  # nobody will answer
                self._ckpt_inflight = None

    # ---- the end of a generation ------------------------------------------------

    def _end_of(self, g: Generation, exc: Optional[BaseException]) -> bool:
        """``with gen:``'s exit: decide what ended it.  True swallows exc."""
        if exc is None:
            g._outcome = "done"
            return False
        if isinstance(exc, Interrupted):
            g._outcome = "interrupted"
            self.state._settle()
            return True
        ce = self._classify(exc)
        if ce is not None:
            g._outcome = "failed"
            g._error = ce
            if self.state._settle():
                log.warning("gen=%d: the update of step %d was applied before the failure: counted, "
                            "without a step report", g.gen, self.state.step - 1)
            return True
        self._fatal(exc)
        return False

    def _fatal(self, exc: BaseException) -> None:
        """The program's own error: tell the agent and let it propagate."""
        if isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            reason = "exit"
        elif isinstance(exc, KeyboardInterrupt):
            code, reason = 130, "KeyboardInterrupt"
        else:
            code, reason = 1, "%s: %s" % (type(exc).__name__, exc)
        try:
            self._teardown()
        except Exception as e:  # the error being reported matters more
            log.warning("teardown: %s", e)
        self._send({"type": "exiting", "reason": _clip(reason), "code": max(-(1 << 31), min(code, (1 << 31) - 1))})

    def _after(self, g: Generation) -> None:
        if g._outcome in (None, "done"):
            self._teardown()
            self._send({"type": "done", "gen": g.gen, "next_step": self.state.step,
                        "digest": self.state.params_digest()})
        elif g._outcome == "failed":
            assert g._error is not None
            self._fail(g.gen, g._error, "step %d" % self.state.step)
        else:
            self._training = False

    # ---- start, loop, close ------------------------------------------------------

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        if self._conn is None and self._conn_from_env:
            self._conn = AgentConnection.from_env(self._env)
        _default_logging()
        self.comm_addr = self.backend.start(self._bind, self.local_rank)
        if self._conn is None:
            return
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        if self._handle_sigterm and threading.current_thread() is threading.main_thread():
            # The C-level handler writes the signal number to the pipe even
            # while this thread is stuck inside a collective; the reader
            # thread then aborts it.  The Python-level handler only stops the
            # default action (death).
            try:
                old = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
                if old != -1:  # someone else's: leave theirs, and SIGTERM, alone
                    signal.set_wakeup_fd(old)
                else:
                    self._old_wakeup = old
                    self._old_sigterm = signal.signal(signal.SIGTERM, _note_sigterm)
            except ValueError:
                pass
        self._reader = threading.Thread(target=self._read_loop, name="elastic_agent-reader", daemon=True)
        self._reader.start()
        log.info("pid=%d local_rank=%d comm=%s step=%d backend=%s", os.getpid(), self.local_rank,
                 self.comm_addr, self.state.step, self.backend.name)
        self._send({"type": "hello", "pid": os.getpid(), "local_rank": self.local_rank,
                    "comm_addr": self.comm_addr, "next_step": self.state.step,
                    "digest": self.state.params_digest()})

    def _close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        try:
            self._teardown()
        except Exception as e:
            log.warning("teardown: %s", e)
        if self._reader is not None:
            try:
                os.write(self._wake_w, b"q")
            except OSError:
                pass
            self._reader.join(5)
            self._reader = None
        if self._old_wakeup is not None:
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGTERM, self._old_sigterm)
            except ValueError:
                pass
            self._old_wakeup = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        self._stager.close()
        self.backend.close()
        if self._conn is not None and self._conn_from_env:
            self._conn.close()

    def _next_event(self) -> Tuple[str, Any]:
        with self._cv:
            while not (self._stop or self._pause or self._prepare is not None
                       or self._commit is not None or self._training):
                self._cv.wait()
            if self._stop:
                return "stop", None
            if self._pause:
                self._pause = False
                return "pause", None
            if self._prepare is not None:
                p, self._prepare = self._prepare, None
                return "prepare", p
            if self._commit is not None:
                c, self._commit = self._commit, None
                return "commit", c
            return "train", None

    def generations(self) -> Iterator[Generation]:
        """Yield one :class:`Generation` per formed generation; the caller
        runs its step loop on each inside ``with gen:``.  Returns when the
        agent says STOP; raises AgentGone when the agent goes away, SystemExit(143)
        after SIGTERM, and lets the program's own errors through (after
        telling the agent ``exiting``)."""
        self._start()
        try:
            if self._conn is None:
                yield from self._alone()
                return
            while True:
                ev, arg = self._next_event()
                if ev == "stop":
                    with self._mu:
                        if self._stop_handled:  # the watchdog is ending the process
                            return
                        self._stop_handled = True
                    if self._watchdog is not None:
                        self._watchdog.cancel()
                    self._teardown()
                    if self._agent_gone:
                        raise AgentGone("the agent closed the connection")
                    if self._sigterm or _sigterm_seen[0]:
                        self._send({"type": "exiting", "reason": "SIGTERM", "code": 143})
                        raise SystemExit(143)
                    self._send({"type": "exiting", "reason": "stop", "code": 0})
                    return
                if ev == "pause":
                    self._teardown()
                    self._send({"type": "aborted", "gen": self.gen, "next_step": self.state.step})
                elif ev == "prepare":
                    self._do_prepare(*arg)
                elif ev == "commit":
                    self._do_commit(arg)
                else:
                    assert self._plan is not None
                    g = self.backend.make_generation(self, self._plan, self._sync_how)
                    yield g
                    g._open = False
                    self._after(g)
        finally:
            self._close()

    def _alone(self) -> Iterator[Generation]:
        """No agent: one generation of world 1, then return."""
        plan = {"type": "commit", "gen": 0, "rank": 0, "world": 1, "peers": [self.comm_addr],
                "sync_root": 0, "backend": "tcp", "timeout_ms": DEFAULT_TIMEOUT_MS}
        self._plan = plan
        self.backend.form(plan)
        g = self.backend.make_generation(self, plan, "in-sync")
        yield g
        g._open = False
        if g._outcome == "failed" and g._error is not None:
            raise g._error

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(gen, *args, **kwargs)`` once per generation, until STOP;
        returns its last return value (see :meth:`generations` for errors)."""
        result = None
        for g in self.generations():
            with g:
                result = fn(g, *args, **kwargs)
        return result


_sigterm_seen = [False]


def _note_sigterm(signum, frame) -> None:
    _sigterm_seen[0] = True


def _default_logging() -> None:
    """Send the package's INFO lines to stderr (which the agent captures)
    unless the program configured logging itself."""
    if log.handlers or logging.getLogger().handlers:
        return
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("elastic_agent: %(levelname)s %(message)s"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False


def _first_difference(mine: list, theirs: list) -> str:
    for i in range(max(len(mine), len(theirs))):
        a = mine[i] if i < len(mine) else None
        b = theirs[i] if i < len(theirs) else None
        if a != b:
            if a is None:
                return "%s is not in this rank's model" % b
            if b is None:
                return "%s is not in rank's model" % a
            an, bn = a.split(" ", 1)[0], b.split(" ", 1)[0]
            if an == bn:
                return "%s: %s here, %s there" % (an, a.split(" ", 1)[1], b.split(" ", 1)[1])
            return "tensor %d: %s here, %s there" % (i, a, b)
    return "(no difference found)"


def run(state: State, fn: Optional[Callable[..., Any]] = None, **options: Any):
    """Run a step loop under the agent, in place across generations.

    As a decorator (Horovod's ``@hvd.elastic.run``)::

        @elastic_agent.run(state)
        def train(gen):
            while state.step < STEPS:
                ...
                gen.report(loss=loss)

        train()

    or directly: ``elastic_agent.run(state, train)``.  ``options`` go to
    :class:`Worker` (backend, digest_every, conn, handle_sigterm, stop_grace).  The call
    returns when the agent says STOP (after training is over), with the loop's
    last return value.  Raises AgentGone when the agent disappears,
    SystemExit(143) after SIGTERM, and the program's own exceptions (after
    telling the agent ``exiting``)."""
    if fn is not None:
        return Worker(state, **options).run(fn)

    def deco(f: F) -> F:
        import functools

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return Worker(state, **options).run(f, *args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return deco


def generations(state: State, **options: Any) -> Iterator[Generation]:
    """The loop form (TorchFT-like)::

        for gen in elastic_agent.generations(state):
            with gen:                 # required: ends the generation cleanly
                while state.step < STEPS:
                    ...
                    gen.report(loss=loss)

    Options and errors as for :func:`run`."""
    return Worker(state, **options).generations()
