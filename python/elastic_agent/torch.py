"""torch.distributed in place: a TorchState and the process group of each generation.

The only module of the package that imports torch.

**The store.**  Every worker hosts a TCPStore server from its start, on the
port of ``EA_COMM_BIND`` (0: any), and announces it as its ``comm_addr`` in
hello and ready — so a generation's rank 0 already listens when the COMMIT
arrives, and the plan needs no new key: the store is at ``peers[0]`` (or at
the COMMIT's optional ``store``).  Each rank, rank 0 included, connects a
client to it and forms the group under the key prefix ``ea/<gen>/``, so
generations never see each other's keys.

**Forming.**  At each COMMIT: ``dist.destroy_process_group()`` of the old
group, then ``init_process_group(backend, store=PrefixStore(…, TCPStore(…)),
rank=, world_size=, timeout=)`` with the COMMIT's ``timeout_ms``; gloo on CPU,
and where CUDA is torch's own default (``init_process_group`` without a
backend): gloo for CPU tensors and NCCL for CUDA tensors in one group,
``"cpu:gloo,cuda:nccl"`` (the COMMIT's optional ``torch_backend`` overrides).

**Abort.**  A gloo collective whose peer is frozen (SIGSTOP, a partition)
blocks until the group's timeout, and torch's own abort does not end it:
on torch 2.15.0, ``ProcessGroup.abort()``, its gloo backend's ``abort()``,
``distributed_c10d._abort_process_group()`` and ``shutdown()`` all return
at once while a rank blocked in ``all_reduce`` with a frozen peer stays
blocked until the 20 s timeout (docs/pytorch.md, "How the abort works").
But gloo's transport fails an operation at once when its socket reads
end-of-file, so for gloo the library records the TCP sockets that appeared
while the group formed (gloo's pairs and the store client: new, connected,
not our store server's) and aborts through them — what the built-in tcp
ring does to itself — from the reader thread, while the program's thread
is blocked inside the collective.  In two phases, so that no write of ours
fails with EPIPE while the collective is still running (gloo 1.13 lost such
a send: queued, never failed, its collective waited out the timeout):
first ``shutdown(SHUT_RD)`` on a dup of each socket — our reads see EOF and
our collective fails, while our writes still succeed and the peers' writes
are still accepted; then, 50 ms later (:data:`GRACE_S`),
``shutdown(SHUT_WR)`` — the peers read EOF and fail too.  Holding the dup
keeps gloo's own close(2) from resetting the connection meanwhile.  A
plain teardown (no collective in flight) sends FIN first and closes 50 ms
later, so that a neighbour already in the next collective fails at once.

NCCL is aborted by torch's own ``ProcessGroup.abort()`` (``ncclCommAbort``
on every communicator of the group; torch ≥ 2.7 with NCCL ≥ 2.26 ends an
in-flight collective), called from the reader thread like the socket
method.  ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (set unless the user set it,
as torchrun does) stays the fallback: a collective that times out all the
same tears the process down, and the agent restarts it; it then receives
the state like a joiner.  (Run on one GPU at world 1 only:
scripts/gpu-check.sh, docs/comm.md.)

**Gradients.**  The fixed global batch B is split by :meth:`Generation.shard`;
for the trajectory not to depend on the world size, each rank's loss is its
samples' loss summed and divided by B, and the gradients are *summed* across
ranks.  :meth:`TorchGeneration.ddp` wraps a module in DDP with a sum hook
(``average=True`` keeps DDP's mean); :meth:`TorchGeneration.allreduce_gradients`
does one flat allreduce of every gradient (the loss riding along), as the
built-in trainer does.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import inspect
import os
import random
import socket
import stat
import struct
import threading
import types
import weakref
from datetime import timedelta
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

import torch
import torch.distributed as dist

from .errors import CommError, StateError
from .layout import TensorName, TensorRef, check_name
from .state import State
from .worker import DEFAULT_TIMEOUT_MS, Backend, Generation, Worker, log

__all__ = ["TorchState", "TorchBackend", "TorchGeneration"]

_DTYPE: Dict[Any, str] = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}
_TORCH = {v: k for k, v in _DTYPE.items()}


# Python's `random` state as a fixed-size blob: version, the Mersenne Twister's
# 624 words and its index, gauss_next and whether it is set.  As msgpack in
# the meta its size varied with the words' values (a word below 2^16 packs in
# 3 bytes, not 5), so ranks whose programs never seeded `random` laid out
# states of different sizes and their checkpoint shards did not tile (seen
# in test_inplace: offsets 3509 against 3508).
_PY_RNG = struct.Struct("<I625IdB")


def _py_rng_tensor() -> "torch.Tensor":
    version, words, gauss = random.getstate()
    blob = _PY_RNG.pack(version, *words, gauss if gauss is not None else 0.0, gauss is not None)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def _py_rng_restore(t: "torch.Tensor") -> None:
    f = _PY_RNG.unpack(bytes(t.tolist()))  # not t.numpy(): torch does not need numpy
    random.setstate((f[0], tuple(f[1:626]), f[626] if f[627] else None))


def _ref(name: str, t: "torch.Tensor") -> TensorRef:
    """A layout entry viewing tensor ``t``'s bytes (no copy on the CPU; a
    device tensor is copied to the host piece by piece when read)."""
    t = t.detach()
    dt = _DTYPE.get(t.dtype)
    if dt is None:
        raise StateError("%s: dtype %s cannot be laid out" % (name, t.dtype))
    shape = tuple(int(d) for d in t.shape)
    n = t.numel() * t.element_size()
    if n == 0:
        return TensorRef(name, dt, shape, None)
    if t.device.type != "cpu":
        flat = t.contiguous().reshape(-1)

        def read(a: int, b: int, flat=flat) -> bytes:
            u = flat.view(torch.uint8)[a:b].cpu()
            return ctypes.string_at(u.data_ptr(), b - a)
        return TensorRef(name, dt, shape, read, keep=flat)
    if not t.is_contiguous():
        t = t.contiguous()
    view = memoryview((ctypes.c_ubyte * n).from_address(t.data_ptr())).cast("B")
    return TensorRef(name, dt, shape, view, keep=t)


def _split(tree: Any, prefix: str, refs: List[TensorRef]) -> Any:
    """Replace the tensors of a nested structure (a state_dict) by
    TensorName placeholders, appending them to refs in a deterministic order
    (dict keys sorted as pack_meta sorts them)."""
    if isinstance(tree, torch.Tensor):
        refs.append(_ref(prefix, tree))
        return TensorName(prefix)
    if isinstance(tree, dict):
        out = {}
        for k in sorted(tree, key=lambda k: ({bool: 0, int: 1, float: 2, str: 3}.get(type(k), 9), k)):
            out[k] = _split(tree[k], "%s.%s" % (prefix, k), refs)
        return out
    if isinstance(tree, (list, tuple)):
        vals = [_split(v, "%s.%d" % (prefix, i), refs) for i, v in enumerate(tree)]
        return tuple(vals) if isinstance(tree, tuple) else vals
    return tree


def _join(tree: Any, tensors: Mapping[str, Any]) -> Any:
    """The inverse of _split: placeholders back to (cloned) tensors."""
    if isinstance(tree, TensorName):
        return tensors[str(tree)][1].clone()
    if isinstance(tree, dict):
        return {k: _join(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join(v, tensors) for v in tree]
    if isinstance(tree, tuple):
        return tuple(_join(v, tensors) for v in tree)
    return tree


def _names(tree: Any) -> List[str]:
    if isinstance(tree, TensorName):
        return [str(tree)]
    if isinstance(tree, dict):
        return [n for v in tree.values() for n in _names(v)]
    if isinstance(tree, (list, tuple)):
        return [n for v in tree for n in _names(v)]
    return []


def _stateful(v: Any) -> bool:
    return callable(getattr(v, "state_dict", None)) and callable(getattr(v, "load_state_dict", None))


class TorchState(State):
    """A model, an optimizer and extras, as Horovod's ``TorchState``::

        state = TorchState(model=model, optimizer=opt, scheduler=sched, epoch=0)
        state.epoch += 1          # extras are attributes

    Laid out (deterministically: two processes that build the same state
    lay it out to identical bytes) as ``model.<key>`` for every entry of
    ``model.state_dict()`` in its order, ``optimizer.<path>`` for the
    tensors of ``optimizer.state_dict()``, ``extras.<name>[.<path>]`` for the
    extras in name order — a tensor, an ``nn.Module`` (its state_dict),
    anything with ``state_dict()``/``load_state_dict()`` (a scheduler, a
    GradScaler), or plain values (numbers, strings, lists, tuples, dicts,
    tensors inside them) — then ``rng.torch``, ``rng.python`` (Python's
    ``random``, a fixed-size blob) and ``rng.cuda.<i>`` once CUDA is
    initialised, when ``rng``; and ``meta``.

    ``optimizer.step`` is wrapped to note that an update was applied: if a
    collective fails after it and before :meth:`Generation.report`, the step
    counts as done on this rank (its gradient allreduce had succeeded).
    Raises StateError at construction for what cannot be laid out.
    """

    def __init__(self, model: Optional["torch.nn.Module"] = None,
                 optimizer: Optional["torch.optim.Optimizer"] = None, *, rng: bool = True,
                 **extras: Any) -> None:
        super().__init__()
        d = self.__dict__
        d["model"] = model
        d["optimizer"] = optimizer
        d["rng"] = rng
        if "step" in extras:
            raise StateError("TorchState: 'step' is the library's (completed steps); name yours otherwise")
        for k in extras:
            check_name("extras." + k, "extra")
        d["_extras"] = dict(extras)
        if optimizer is not None:
            self._wrap_step(optimizer)
        self.flat()  # fail now, naming what cannot be laid out

    def __getattr__(self, k: str) -> Any:
        ex = self.__dict__.get("_extras")
        if ex is not None and k in ex:
            return ex[k]
        raise AttributeError(k)

    def __setattr__(self, k: str, v: Any) -> None:
        if k in self.__dict__.get("_extras", {}):
            self._extras[k] = v
        else:
            object.__setattr__(self, k, v)

    def default_backend(self) -> "TorchBackend":
        return TorchBackend()

    def _wrap_step(self, opt: Any) -> None:
        orig = opt.step
        me = weakref.ref(self)

        def step(_self: Any, *a: Any, **kw: Any) -> Any:
            r = orig(*a, **kw)
            s = me()
            if s is not None:
                s._applied = True
            return r
        # An LR scheduler built before us has wrapped step already and marks
        # its wrapper (torch 2.x: _wrapped_by_lr_sched; 1.13: _with_counter);
        # without the mark on ours, every scheduler.step() warns that
        # optimizer.step() was overridden.
        for mark in ("_wrapped_by_lr_sched", "_with_counter"):
            if hasattr(orig, mark):
                setattr(step, mark, getattr(orig, mark))
        opt.step = types.MethodType(step, opt)

    # ---- layout ---------------------------------------------------------------

    def _model_refs(self) -> List[TensorRef]:
        if self.model is None:
            return []
        return [_ref("model." + k, t) for k, t in self.model.state_dict().items()]

    def _extra_tree(self, name: str, v: Any, refs: List[TensorRef]) -> Any:
        p = "extras." + name
        if isinstance(v, torch.Tensor):
            refs.append(_ref(p, v))
            return {"value": TensorName(p)}
        if isinstance(v, torch.nn.Module):
            return {"module": _split(dict(v.state_dict()), p, refs)}
        if _stateful(v):
            return {"state_dict": _split(v.state_dict(), p, refs)}
        return {"value": _split(v, p, refs)}

    def _collect(self) -> Tuple[List[TensorRef], Dict[str, Any]]:
        refs = self._model_refs()
        tree: Dict[str, Any] = {}
        if self.optimizer is not None:
            tree["optimizer"] = _split(self.optimizer.state_dict(), "optimizer", refs)
        tree["extras"] = {k: self._extra_tree(k, self._extras[k], refs) for k in sorted(self._extras)}
        if self.rng:
            refs.append(_ref("rng.torch", torch.get_rng_state()))
            refs.append(_ref("rng.python", _py_rng_tensor()))
            r: Dict[str, Any] = {"cuda": 0}
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                states = torch.cuda.get_rng_state_all()
                for i, s in enumerate(states):
                    refs.append(_ref("rng.cuda.%d" % i, s))
                r["cuda"] = len(states)
            tree["rng"] = r
        return refs, tree

    def _params(self) -> List[TensorRef]:
        return self._model_refs()

    def _signature_names(self) -> List[TensorRef]:
        refs = self._model_refs()
        for k in sorted(self._extras):
            v = self._extras[k]
            if isinstance(v, (torch.Tensor, torch.nn.Module)):
                self._extra_tree(k, v, refs)
        return refs

    def _from_buffer(self, spec, buf) -> Any:
        dtype = _TORCH[spec.dtype]
        if spec.length == 0:
            return torch.empty(spec.shape, dtype=dtype)
        if isinstance(buf, bytes):
            buf = bytearray(buf)
        t = torch.frombuffer(buf, dtype=torch.uint8, count=spec.length, offset=spec.offset)
        return t.view(dtype).reshape(spec.shape)

    # ---- load -----------------------------------------------------------------

    def _check(self, tensors: Dict[str, Any], meta: Dict[str, Any], what: str) -> None:
        def mismatch(name: str, spec, mine: TensorRef) -> StateError:
            return StateError("%s: %s: %s, but %s in this program" % (
                what, name, spec.describe(), "%s %s" % (mine.dtype, "x".join(map(str, mine.shape)) or "-")))

        mine = self._model_refs()
        for r in mine:
            got = tensors.get(r.name)
            if got is None:
                raise StateError("%s: %s: missing (this program's model has it)" % (what, r.name))
            spec = got[0]
            if spec.dtype != r.dtype or spec.shape != r.shape:
                raise mismatch(r.name, spec, r)
        have = {r.name for r in mine}
        for name in tensors:
            if name.startswith("model.") and name not in have:
                raise StateError("%s: %s: not in this program's model" % (what, name))
        if (self.optimizer is None) != ("optimizer" not in meta):
            raise StateError("%s: optimizer: %s" % (what, "this program has none" if self.optimizer is None
                                                       else "the state has none"))
        ex = meta.get("extras")
        if not isinstance(ex, dict):
            raise StateError("%s: meta has no extras" % what)
        for k in sorted(self._extras):
            if k not in ex:
                raise StateError("%s: extras.%s: missing" % (what, k))
        for k in sorted(ex):
            if k not in self._extras:
                raise StateError("%s: extras.%s: not an extra of this program" % (what, k))
            v = self._extras[k]
            if isinstance(v, (torch.Tensor, torch.nn.Module)):
                refs: List[TensorRef] = []
                self._extra_tree(k, v, refs)
                for r in refs:
                    got = tensors.get(r.name)
                    if got is None:
                        raise StateError("%s: %s: missing" % (what, r.name))
                    if got[0].dtype != r.dtype or got[0].shape != r.shape:
                        raise mismatch(r.name, got[0], r)
        for n in _names(meta):
            if n not in tensors:
                raise StateError("%s: %s: referenced but not in the table" % (what, n))

    def _apply(self, tensors: Dict[str, Any], meta: Dict[str, Any]) -> None:
        with torch.no_grad():
            if self.model is not None:
                sd = self.model.state_dict()
                for k, t in sd.items():
                    t.copy_(tensors["model." + k][1])
            if self.optimizer is not None:
                self.optimizer.load_state_dict(_join(meta["optimizer"], tensors))
            for k, node in meta["extras"].items():
                cur = self._extras[k]
                if "module" in node:
                    cur.load_state_dict(_join(node["module"], tensors))
                elif "state_dict" in node:
                    cur.load_state_dict(_join(node["state_dict"], tensors))
                else:
                    v = _join(node["value"], tensors)
                    if (isinstance(cur, torch.Tensor) and isinstance(v, torch.Tensor)
                            and cur.shape == v.shape and cur.dtype == v.dtype):
                        cur.copy_(v)  # keep the program's tensor object
                    else:
                        self._extras[k] = v
            r = meta.get("rng")
            if self.rng and isinstance(r, dict):
                if "rng.torch" in tensors:
                    torch.set_rng_state(tensors["rng.torch"][1].clone())
                n = int(r.get("cuda", 0))
                if n and torch.cuda.is_available():
                    have = torch.cuda.device_count()
                    for i in range(min(n, have)):
                        torch.cuda.set_rng_state(tensors["rng.cuda.%d" % i][1].clone(), i)
                if "rng.python" in tensors:
                    _py_rng_restore(tensors["rng.python"][1])
                else:  # a state laid out before rng.python: the tuple in the meta
                    py = r.get("python")
                    if isinstance(py, (list, tuple)) and len(py) == 3:
                        random.setstate((py[0], tuple(py[1]), py[2]))


# ---- sockets of a process group (the abort) ---------------------------------------


def _inet_sockets(skip_local_port: int) -> Set[Tuple[int, int]]:
    """(fd, inode) of this process's connected TCP sockets, except those of
    our own store server (local port ``skip_local_port``)."""
    out: Set[Tuple[int, int]] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        fd = int(name)
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
                continue
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                continue
            if s.getsockname()[1] == skip_local_port:
                continue
            out.add((fd, st.st_ino))
        except OSError:
            continue
        finally:
            s.close()
    return out


#: How long a peer has to read our FIN before the connection may reset: its
#: gloo thread reads at once; 50 ms covers a loaded machine's scheduling.
GRACE_S = 0.05


def _shut(s: socket.socket, how: int) -> None:
    try:
        s.shutdown(how)
    except OSError:
        pass  # already reset, or closed


def _shut_all(held: Iterable[socket.socket], how: int) -> None:
    for s in held:
        _shut(s, how)


def _close_all(held: Iterable[socket.socket]) -> None:
    for s in held:
        try:
            s.close()
        except OSError:
            pass


def _split_addr(addr: str) -> Tuple[str, int]:
    """"host:port" or "[v6]:port" → (host, port); ValueError otherwise."""
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        if not rest.startswith(":"):
            raise ValueError("address %r: expected [v6]:port" % addr)
        return host, int(rest[1:])
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError("address %r: expected host:port" % addr)
    return host, int(port)


def _join_addr(host: str, port: int) -> str:
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _iface_of(ip: str) -> Optional[str]:
    """The network interface that holds IPv4 address ``ip`` (SIOCGIFADDR)."""
    try:
        want = socket.inet_aton(ip)
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _idx, name in socket.if_nameindex():
            try:
                r = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            if r[20:24] == want:
                return name
    return None


#: DDP's constructor takes init_sync (torch ≥ 2.7): see TorchGeneration.ddp.
_DDP_INIT_SYNC = "init_sync" in inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters


def _sum_hook(_state, bucket):  # no annotations: DDP checks the bucket's
    """A DDP comm hook that sums (DDP's default divides by the world size)."""
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


_COMM_WORDS = ("gloo", "nccl", "connection", "timed out", "timeout", "socket", "broken pipe",
               "reset by peer", "closed by peer", "store", "processgroup", "pair.cc", "unbound_buffer",
               "connect()", "refused")


# torch's own default where CUDA is (init_process_group without a backend):
# collectives on CPU tensors go through gloo, on CUDA tensors through NCCL —
# so a program that keeps its model on the CPU works on a GPU node too (a
# group with NCCL alone has no backend for CPU tensors: 3 of the pytest
# suite's CPU programs failed on the GPU machine, torch 2.11.0, most likely
# so).  Not yet run on a GPU itself (docs/comm.md).
BOTH = "cpu:gloo,cuda:nccl"


def _has_nccl(backend: str) -> bool:
    return "nccl" in backend


class TorchBackend(Backend):
    """torch.distributed, one default process group per generation.

    ``backend``: "gloo", "nccl" or None (where CUDA is available, torch's
    own default :data:`BOTH` — gloo for CPU tensors, NCCL for CUDA ones —
    else gloo; a COMMIT's ``torch_backend`` overrides all three)."""

    def __init__(self, backend: Optional[str] = None) -> None:
        if backend not in (None, "gloo", "nccl"):
            raise ValueError("TorchBackend: backend %r: expected 'gloo', 'nccl' or None" % backend)
        self.requested = backend
        self.name = backend or (BOTH if torch.cuda.is_available() else "gloo")
        self.gen: Optional[int] = None
        self.device = torch.device("cpu")
        self._lock = threading.RLock()
        self._aborted = False
        self._forming = False
        self._before: Set[Tuple[int, int]] = set()
        self._socks: Set[Tuple[int, int]] = set()
        self._store_socks: Set[Tuple[int, int]] = set()
        self._master: Any = None
        self._client: Any = None
        self._store_port = -1
        self._ddp: Dict[int, Any] = {}
        self._held: Dict[int, socket.socket] = {}
        self.rank = 0
        self.world = 1

    def start(self, bind: str, local_rank: int) -> str:
        host, port = _split_addr(bind)
        wildcard = host in ("", "0.0.0.0", "::")
        self._master = dist.TCPStore("127.0.0.1" if wildcard else host, port, None, True,
                                     timedelta(seconds=300), wait_for_workers=False)
        self._store_port = int(self._master.port)
        if not os.environ.get("GLOO_SOCKET_IFNAME") and not wildcard:
            iface = _iface_of(host)
            if iface:
                # gloo binds the address of this interface, not whatever the
                # hostname resolves to
                os.environ["GLOO_SOCKET_IFNAME"] = iface
        if _has_nccl(self.name) and torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return _join_addr(socket.gethostname() if wildcard else host, self._store_port)

    def form(self, plan: Mapping[str, Any]) -> None:
        peers = plan.get("peers") or []
        addr = plan.get("store") or (peers[0] if peers else None)
        if not addr:
            raise CommError("commit: no store address (no store key and no peers)", errno.EINVAL)
        try:
            host, port = _split_addr(addr)
        except ValueError as e:
            raise CommError(str(e), errno.EINVAL)
        timeout = timedelta(milliseconds=plan.get("timeout_ms") or DEFAULT_TIMEOUT_MS)
        be = plan.get("torch_backend") or self.requested or self.name
        with self._lock:
            self.gen = plan["gen"]
            if self._aborted:
                raise CommError("aborted before forming", errno.ECANCELED)
            self._before = _inet_sockets(self._store_port)
            self._forming = True
        ok = False
        try:
            kw: Dict[str, Any] = {}
            if _has_nccl(be):
                os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
                if torch.cuda.is_available():
                    # eager: the communicator is made here, so a failure to
                    # form is raised by form() and abort() has a comm to end
                    kw["device_id"] = torch.device("cuda", torch.cuda.current_device())
            client = dist.TCPStore(host, port, None, False, timeout)
            # The store client's own connections: an abort while forming shuts
            # them (a rank waiting in the store for a dead peer fails at
            # once), nothing after.  torch 1.13's store client thread does not
            # catch an error on its callback connection: with them shut at
            # teardown like gloo's, 2 of ~290 standalone world-1 runs under
            # load died in std::terminate ("Connection reset by peer", in
            # destroy_process_group or the store's destructor); 0 of 600
            # without.
            with self._lock:
                self._store_socks = _inet_sockets(self._store_port) - self._before
            store = dist.PrefixStore("ea/%d/" % plan["gen"], client)
            # No closing barrier: torch 2.x's init_process_group has none
            # unless TORCH_DIST_INIT_BARRIER=1 (1.13 polled the store every
            # 10 ms for one, up to 10 ms a formation).
            dist.init_process_group(be, store=store, rank=plan["rank"], world_size=plan["world"],
                                    timeout=timeout, **kw)
            self._client = client
            ok = True
        except RuntimeError as e:
            raise self.comm_error(e) or CommError(str(e), errno.EIO)
        finally:
            with self._lock:
                self._forming = False
                self._socks = _inet_sockets(self._store_port) - self._before - self._store_socks
                aborted = self._aborted
            if aborted or not ok:
                _shut_all(self._hold(self._socks), socket.SHUT_RDWR)
        if aborted:
            raise CommError("aborted while forming", errno.ECANCELED)
        self.name = be
        self.rank, self.world = plan["rank"], plan["world"]
        self.device = torch.device("cuda", torch.cuda.current_device()) if _has_nccl(be) else torch.device("cpu")

    def _hold(self, socks: Iterable[Tuple[int, int]]) -> List[socket.socket]:
        """Our own dups of the group's sockets: while we hold one, gloo's
        close(2) of its fd does not close the connection, so we choose when
        the peer sees FIN (see abort)."""
        out = []
        with self._lock:
            for fd, ino in socks:
                s = self._held.get(ino)
                if s is None:
                    try:
                        if os.fstat(fd).st_ino != ino:
                            continue
                        s = socket.socket(fileno=os.dup(fd))
                    except OSError:
                        continue
                    self._held[ino] = s
                out.append(s)
        return out

    def abort(self) -> None:
        """Two phases, because of how gloo 1.13 fails: a send whose write(2)
        returns EPIPE/ECONNRESET is queued and never failed, so its collective
        waits out the timeout.  1) shutdown(SHUT_RD): our reads see EOF at
        once and our collective fails, while our writes still succeed and a
        peer's writes to us are still accepted (no RST).  2) GRACE_S later,
        when our gloo has closed the pair, shutdown(SHUT_WR): the peers read
        EOF and fail too."""
        with self._lock:
            self._aborted = True
            socks = (_inet_sockets(self._store_port) - self._before) if self._forming else set(self._socks)
        if _has_nccl(self.name) and not self._forming:
            self._abort_nccl()
        held = self._hold(socks)
        for s in held:
            _shut(s, socket.SHUT_RD)
        if held:
            t = threading.Timer(GRACE_S, _shut_all, [held, socket.SHUT_WR])
            t.daemon = True
            t.start()

    def _abort_nccl(self) -> None:
        """torch's own abort of the generation's group (ncclCommAbort):
        an NCCL collective in flight ends with an error.  Where this torch
        has none, the collective ends at the group's timeout (the watchdog,
        TORCH_NCCL_ASYNC_ERROR_HANDLING)."""
        if not dist.is_initialized():
            return  # no group (not formed yet, or torn down): nothing in flight
        abort = getattr(dist.group.WORLD, "abort", None)
        if abort is None:
            log.info("abort: this torch cannot abort an NCCL group; a collective in flight ends at its timeout")
            return
        try:
            abort()
        except RuntimeError as e:
            log.warning("abort: ProcessGroup.abort(): %s", e)

    def teardown(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, set()
        # FIN first, with our receive side open: a neighbour already in the
        # next collective reads EOF and fails at once, and its writes to us
        # are still accepted, so none of them can hit gloo's lost-send case.
        _shut_all(self._hold(socks), socket.SHUT_WR)
        if self._ddp:
            alive = [weakref.ref(d) for d in self._ddp.values()]
            self._ddp.clear()
            if any(r() is not None for r in alive):
                gc.collect()  # a DDP in a reference cycle still has its autograd hooks
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except RuntimeError as e:
                log.warning("destroy_process_group: %s", e)
        self._client = None
        with self._lock:
            self.gen = None
            self._aborted = False
            held, self._held = list(self._held.values()), {}
        if held:  # the connections close GRACE_S later, after the peers read our FIN
            t = threading.Timer(GRACE_S, _close_all, [held])
            t.daemon = True
            t.start()

    def close(self) -> None:
        self.teardown()
        # A precaution, not measured apart from form's change: the
        # generation's store client (held by a process group or a DDP in a
        # cycle) goes before the server it talks to.
        gc.collect()
        self._master = None

    # ---- the collectives of the state sync -------------------------------------

    def allreduce_max(self, values: list) -> list:
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [int(x) for x in t.tolist()]

    def broadcast(self, data: Optional[bytearray], root: int, size: Optional[int] = None) -> bytearray:
        if size is None:
            n = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64, device=self.device)
            dist.broadcast(n, root)
            size = int(n.item())
        elif data is not None and len(data) < size:
            data = data + bytes(size - len(data))  # rare: a rank with a longer meta
        out = data if data is not None else bytearray(size)
        if size == 0:
            return out
        host = torch.frombuffer(out, dtype=torch.uint8)
        if self.device.type == "cpu":
            dist.broadcast(host, root)
        else:
            dev = host.to(self.device)
            dist.broadcast(dev, root)
            if data is None:
                host.copy_(dev.cpu())
        return out

    def comm_error(self, exc: BaseException) -> Optional[CommError]:
        if isinstance(exc, CommError):
            return exc
        if not isinstance(exc, RuntimeError):
            return None
        msg = str(exc)
        low = msg.lower()
        if not any(w in low for w in _COMM_WORDS):
            return None
        if "timed out" in low or "timeout" in low:
            e = errno.ETIMEDOUT
        elif any(w in low for w in ("reset", "closed", "broken pipe", "refused")):
            e = errno.ECONNRESET
        else:
            e = errno.EIO
        first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
        # No peer: gloo says "Connection reset by peer [10.0.0.2]:43012" or
        # "Timed out waiting ... for recv operation", neither a rank we could
        # trust, so the failure is reported without one (ea_ipc.h "failed").
        return CommError(first, e)

    def make_generation(self, worker: Worker, plan: Mapping[str, Any], sync: str) -> "TorchGeneration":
        return TorchGeneration(worker, plan, sync, self)


class TorchGeneration(Generation):
    """A generation with its torch process group formed.

    ``process_group`` (the default group: plain ``dist.all_reduce(t)`` works),
    ``backend`` ("gloo", "nccl" or :data:`BOTH`), ``device`` (where the state
    sync's and :meth:`allreduce_gradients`' tensors live: ``cuda:<local
    device>`` when the group has NCCL, else CPU)."""

    def __init__(self, worker: Worker, plan: Mapping[str, Any], sync: str, tb: TorchBackend) -> None:
        super().__init__(worker, plan, sync)
        self._tb = tb
        self.backend = tb.name
        self.device = tb.device
        self.process_group = dist.group.WORLD if dist.is_initialized() else None

    def ddp(self, module: Optional["torch.nn.Module"] = None, *, average: bool = False,
            **kwargs: Any) -> "torch.nn.parallel.DistributedDataParallel":
        """``module`` (default: the state's model) wrapped in DDP over this
        generation's group — one wrapper per module per generation, so call
        it inside the loop body.  Gradients are summed across ranks unless
        ``average`` (see the module's docstring); ``kwargs`` go to DDP."""
        m = module if module is not None else getattr(self.state, "model", None)
        if m is None:
            raise ValueError("ddp(): no module (and the state has no model)")
        d = self._tb._ddp.get(id(m))
        if d is None:
            DDP = torch.nn.parallel.DistributedDataParallel
            # device_ids for a module on a GPU only: a CPU module under
            # BOTH goes through gloo, and DDP refuses device_ids for it
            p = next(m.parameters(), None)
            if p is not None and p.device.type == "cuda":
                kwargs.setdefault("device_ids", [p.device.index])
            # DDP's constructor checks the parameters' shapes across the
            # ranks (an allgather) and broadcasts every parameter and buffer
            # from rank 0: for the state's model, two collectives more per
            # generation — one a second full broadcast — after the state
            # sync has compared the tensor tables (the signature) and made
            # the models bit-identical (the digest allreduce).  init_sync=False
            # (torch ≥ 2.7) skips both for it; any other module gets DDP's
            # own, and so does the state's model on a torch without it.
            if m is getattr(self.state, "model", None) and _DDP_INIT_SYNC:
                kwargs.setdefault("init_sync", False)
            d = DDP(m, **kwargs)
            if not average:
                d.register_comm_hook(None, _sum_hook)
            self._tb._ddp[id(m)] = d
        return d

    def allreduce_gradients(self, params: Optional[Iterable["torch.Tensor"]] = None,
                            loss: Optional[Any] = None) -> Optional[float]:
        """Sum every parameter's gradient over the ranks in one flat
        allreduce (a missing gradient counts as zeros, so every rank sends the
        same layout); ``loss`` (this rank's part) rides in the last slot and
        the global sum is returned.  Raises what the collective raises (a
        peer died: the step is not applied — call optimizer.step() after)."""
        if params is None:
            model = getattr(self.state, "model", None)
            if model is None:
                raise ValueError("allreduce_gradients(): no params (and the state has no model)")
            params = model.parameters()
        ps = [p for p in params if p.requires_grad]
        if not ps:
            return None
        dtype = ps[0].dtype
        parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).to(self.device, dtype)
                 for p in ps]
        extra = loss is not None
        if extra:
            lt = loss.detach() if isinstance(loss, torch.Tensor) else torch.tensor(float(loss))
            parts.append(lt.reshape(1).to(self.device, dtype))
        flat = torch.cat(parts)
        dist.all_reduce(flat)
        off = 0
        with torch.no_grad():
            for p in ps:
                n = p.numel()
                g = flat[off:off + n].view_as(p).to(p.device, p.dtype)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
                off += n
        return float(flat[off]) if extra else None
