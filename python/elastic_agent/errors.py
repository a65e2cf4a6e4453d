"""The exceptions of the package.

Every error says which field, tensor or file was wrong, so that a log line is
enough to find the cause: ``ProtocolError("commit.peers[2]: too long")``,
``StateError("model.fc.weight: f32 8x4 in the checkpoint, f32 8x2 in the model")``.
"""
from __future__ import annotations

from typing import Optional

__all__ = [
    "ElasticAgentError",
    "ProtocolError",
    "AgentGone",
    "StateError",
    "CheckpointError",
    "CommError",
]


class ElasticAgentError(Exception):
    """Base class of every error this package raises on purpose."""


class ProtocolError(ElasticAgentError, ValueError):
    """A message that is not in the worker protocol (docs/worker.md).

    The text starts with the field, as the agent's decoder writes it:
    ``"<type>.<key>[<index>]: <what was wrong>"``.
    """


class AgentGone(ElasticAgentError, ConnectionError):
    """The agent's end of the socket closed: nobody is left to obey.

    A worker must exit when this happens (docs/worker.md); :func:`run` raises it
    out of the user's program after tearing the process group down.
    """


class StateError(ElasticAgentError):
    """A flat state that does not fit this program's state (another model, a
    damaged buffer).  The text names the first tensor that differs."""


class CheckpointError(ElasticAgentError):
    """A checkpoint that cannot be found, verified or loaded; the text names the
    directory, the file and what was wrong with it."""


class CommError(ElasticAgentError):
    """A collective operation of the generation failed (a peer died, a timeout,
    an abort).  ``errno`` is the positive errno the agent is told (negated).
    ``peer``: the rank of the generation it could not exchange with, when the
    backend can tell (the agent tells the controller, which holds out one end
    of a link that fails generation after generation: docs/operations.md, "A
    bad link"); None when it cannot — torch's gloo and NCCL errors do not
    name the peer, so a library program's failures never do."""

    def __init__(self, message: str, errno: int, peer: Optional[int] = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.peer = peer
