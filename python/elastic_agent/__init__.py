"""elastic_agent: PyTorch programs that re-form in place under elastic-agent.

A program written for this package is a *worker* of the agent (docs/worker.md):
the agent starts it with its socket on fd 3, and the same process lives through
every generation — when a node dies, joins or drains, the process group is torn
down and formed again in place, the state is broadcast from the rank with the
most completed steps, and the step loop continues where it was::

    import elastic_agent
    from elastic_agent.torch import TorchState

    state = TorchState(model=model, optimizer=opt, epoch=0)

    @elastic_agent.run(state)
    def train(gen):
        ddp = gen.ddp()                       # DDP over this generation's group
        while state.step < STEPS:
            idx = gen.samples(GLOBAL_BATCH)   # this rank's slice of step's batch
            ...
            gen.report(loss=loss)             # one step done; may end the generation

    train()

See docs/pytorch.md.  Importing this package imports neither torch nor
anything with side effects; ``elastic_agent.TorchState`` imports torch on
first use.

The API is this package's names and these modules: ``elastic_agent.torch``
(``TorchState``), ``.errors``, ``.checkpoint`` (reading checkpoints back),
``.worker`` (``Backend``, what ``run(state, backend=…)`` takes), ``.state``
(``State``, the base of a state class), ``.layout`` (the "ea-state-1" flat
format) and ``.xxh3`` (the agent's hash).  A module whose name starts with
``_`` (the wire codec ``_protocol``, the fd-3 socket ``_connection``, the
checkpoint staging buffer ``_staging``, ``_mpread``, ``_warm``) is internal:
it may change with the agent, without notice.
"""
from __future__ import annotations

from typing import Any

from .errors import (AgentGone, CheckpointError, CommError, ElasticAgentError, ProtocolError,
                     StateError)
from .layout import split_range
from .state import ObjectState, State
from .worker import Generation, Interrupted, Worker, generations, run

__version__ = "0.1.0"

__all__ = [
    "run", "generations", "Generation", "Worker", "Interrupted", "State", "ObjectState",
    "TorchState", "split_range", "ElasticAgentError", "ProtocolError", "AgentGone", "StateError",
    "CheckpointError", "CommError", "__version__",
]


def __getattr__(name: str) -> Any:
    if name == "TorchState":  # imports torch: only when asked for
        from .torch import TorchState
        return TorchState
    raise AttributeError("module 'elastic_agent' has no attribute %r" % name)
