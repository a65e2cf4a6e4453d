"""What the generation loop needs from a training state, and a plain-Python one.

A :class:`State` is everything a rank must hold to continue training at its
step: the library lays it out (:meth:`State.flat`), broadcasts it from the rank
with the most completed steps, stages byte ranges of it into checkpoints and
loads it back (:meth:`State.load`).  ``step`` is the number of completed steps
— the next step to compute and the data cursor — and only the library moves
it (one per :meth:`Generation.report <elastic_agent.worker.Generation.report>`).

Like Horovod's ``State`` it has :meth:`commit` / :meth:`restore` for an
in-memory snapshot; the library does not need them (a step is applied only
after its collectives succeeded, so a failure leaves the state as it was),
but a program that changes its state after its last collective of a step can
use them to roll back.

:class:`ObjectState` holds plain values and bytes; :class:`elastic_agent.torch.TorchState`
holds a model, an optimizer and extras.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import xxhash

from .errors import StateError
from .layout import FlatState, TensorName, TensorRef, TensorSpec, pack_meta, parse_header, unpack_meta

__all__ = ["State", "ObjectState", "META"]

#: The name of the table tensor that holds the non-tensor parts.
META = "meta"


class State:
    """Base class: subclasses implement :meth:`_collect`, :meth:`_params`,
    :meth:`_check` and :meth:`_apply`.

    The layout is: the subclass's tensors in its fixed order, then ``meta``
    (canonical msgpack of ``{"step": …, **_meta()}``).  Names that start with
    ``rng.`` hold random-number-generator state: they travel with the state
    but are left out of :meth:`sync_digest`, because ranks may draw different
    amounts of randomness and still hold the same model.
    """

    def __init__(self) -> None:
        self.step = 0
        self._snapshot: Optional[bytearray] = None
        self._applied = False  # an optimizer step since the last report

    # ---- what subclasses provide ---------------------------------------------

    def _collect(self) -> Tuple[List[TensorRef], Dict[str, Any]]:
        """The tensors, in a fixed order that depends only on the program,
        and the non-tensor parts (a tree for :func:`pack_meta`, with
        :class:`TensorName` placeholders where tensors were)."""
        raise NotImplementedError

    def _check(self, tensors: Dict[str, Any], meta: Dict[str, Any], what: str) -> None:
        """Raise StateError (naming the first tensor that differs) unless the
        state read from a buffer fits this program; change nothing."""
        raise NotImplementedError

    def _apply(self, tensors: Dict[str, Any], meta: Dict[str, Any]) -> None:
        """Take over a state that passed :meth:`_check`."""
        raise NotImplementedError

    def _params(self) -> List[TensorRef]:
        """The tensors whose digest the step reports carry (the model)."""
        return self._collect()[0]

    def _signature_names(self) -> List[TensorRef]:
        """The tensors whose names, dtypes and shapes must agree between ranks
        (the model; an optimizer's state appears only after its first step)."""
        return self._params()

    def _from_buffer(self, spec, buf) -> Any:
        """A table tensor of ``buf`` as the subclass wants it (bytes here)."""
        return bytes(memoryview(buf)[spec.offset:spec.offset + spec.length])

    # ---- the library's interface ------------------------------------------------

    def flat(self) -> FlatState:
        """The current state laid out (views of the live tensors: use it
        before the state changes).  Raises StateError for what cannot be laid
        out, naming it."""
        refs, tree = self._collect()
        meta = pack_meta({"step": self.step, **tree})
        refs.append(TensorRef(META, "u8", (len(meta),), meta))
        return FlatState(refs)

    def flatten(self) -> bytearray:
        """The state as bytes in the "ea-state-1" layout (a copy)."""
        return self.flat().to_bytes()

    def layout(self) -> List[TensorSpec]:
        """The tensor table: (name, dtype, shape, offset, length) of each tensor."""
        return self.flat().specs

    def load(self, buf: Any, what: str = "state") -> None:
        """Replace this state with the flat state in ``buf`` (bytes-like).

        Raises StateError, with nothing changed, when it is not a flat state,
        when a tensor of this program is missing or has another dtype or shape
        (``"model.fc.weight: f32 8x4 in the state, f32 8x2 here"``), or when a
        part does not load."""
        specs, _h, total = parse_header(buf, what)
        mv = memoryview(buf).cast("B")
        if mv.nbytes < total:
            raise StateError("%s: %d bytes, the header says %d" % (what, mv.nbytes, total))
        by_name = {s.name: s for s in specs}
        if META not in by_name:
            raise StateError("%s: no %r tensor" % (what, META))
        m = by_name.pop(META)
        meta = unpack_meta(mv[m.offset:m.offset + m.length])
        if not isinstance(meta, dict) or type(meta.get("step")) is not int or meta["step"] < 0:
            raise StateError("%s: meta has no step" % what)
        tensors = {name: (spec, self._from_buffer(spec, buf)) for name, spec in by_name.items()}
        self._check(tensors, meta, what)
        self._apply(tensors, meta)
        self.step = meta["step"]
        self._applied = False

    def params_digest(self) -> int:
        """XXH3-64 of the model's bytes (the ``digest`` of step reports)."""
        h = xxhash.xxh3_64()
        for t in self._params():
            if t.nbytes:
                h.update(t.read(0, t.nbytes))
        return h.intdigest()

    def sync_digest(self) -> int:
        """XXH3-64 of everything but the RNG state: equal on two ranks exactly
        when neither needs the other's state."""
        h = xxhash.xxh3_64()
        refs, tree = self._collect()
        for t in refs:
            if t.nbytes and not t.name.startswith("rng."):
                h.update(t.name.encode())
                h.update(t.read(0, t.nbytes))
        meta = {k: v for k, v in tree.items() if k != "rng"}
        h.update(pack_meta({"step": self.step, **meta}))
        return h.intdigest()

    def signature(self) -> int:
        """XXH3-64 of the names, dtypes and shapes that must agree between
        ranks of one job."""
        h = xxhash.xxh3_64()
        for t in self._signature_names():
            h.update(("%s %s %s\n" % (t.name, t.dtype, "x".join(map(str, t.shape)))).encode())
        return h.intdigest()

    def signature_lines(self) -> List[str]:
        return ["%s %s %s" % (t.name, t.dtype, "x".join(map(str, t.shape)) or "-")
                for t in self._signature_names()]

    # ---- Horovod's commit/restore -------------------------------------------------

    def commit(self) -> None:
        """Keep an in-memory copy of the state (as Horovod's ``state.commit()``)."""
        self._snapshot = self.flat().to_bytes()

    def restore(self) -> None:
        """Go back to the last :meth:`commit` (StateError if there was none)."""
        if self._snapshot is None:
            raise StateError("restore: nothing committed")
        self.load(self._snapshot, "the committed state")

    def sync(self) -> None:
        """Horovod's ``state.sync()``: nothing to do here, because every
        generation starts with a state sync from the rank with the most
        steps (the library calls it, not the program)."""

    def _settle(self) -> bool:
        """After a failed collective: if the program applied an update since
        the last report, that step is complete on this rank (its gradient
        allreduce had succeeded): count it.  True if it did."""
        if self._applied:
            self._applied = False
            self.step += 1
            return True
        return False


class ObjectState(State):
    """A state of plain values: ``ObjectState(epoch=0, weights=bytearray(...))``.

    ``bytes``/``bytearray`` values become ``u8`` tensors of the layout (name
    ``extras.<key>``); everything else must be msgpack-able (numbers,
    strings, lists, tuples, dicts) and goes into the meta blob.  Values are
    attributes: ``state.epoch += 1``.  Used for programs without torch and by
    the tests.
    """

    def __init__(self, **values: Any) -> None:
        super().__init__()
        if "step" in values:
            raise StateError("ObjectState: 'step' is the library's (completed steps)")
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, k: str) -> Any:
        v = self.__dict__.get("_values")
        if v is not None and k in v:
            return v[k]
        raise AttributeError(k)

    def __setattr__(self, k: str, v: Any) -> None:
        if k in self.__dict__.get("_values", {}):
            self._values[k] = v
        else:
            object.__setattr__(self, k, v)

    def _collect(self) -> Tuple[List[TensorRef], Dict[str, Any]]:
        refs, tree = [], {}
        for k in sorted(self._values):
            v = self._values[k]
            if isinstance(v, (bytes, bytearray)):
                refs.append(TensorRef("extras." + k, "u8", (len(v),), v if len(v) else None))
                tree[k] = TensorName("extras." + k)
            else:
                tree[k] = v
        return refs, {"extras": tree}

    def _check(self, tensors, meta, what) -> None:
        ex = meta.get("extras")
        if not isinstance(ex, dict):
            raise StateError("%s: meta has no extras" % what)
        for k in self._values:
            if k not in ex:
                raise StateError("%s: extras.%s: missing" % (what, k))
        for k, v in ex.items():
            if isinstance(v, TensorName) and v not in tensors:
                raise StateError("%s: %s: referenced but not in the table" % (what, v))

    def _apply(self, tensors, meta) -> None:
        vals = {}
        for k, v in meta["extras"].items():
            vals[k] = bytearray(tensors[v][1]) if isinstance(v, TensorName) else v
        self._values.clear()
        self._values.update(vals)
