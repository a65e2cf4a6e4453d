"""The worker's end of the agent's socketpair (fd 3, SOCK_SEQPACKET).

One message is one packet: :meth:`AgentConnection.send` is one ``sendmsg``
(atomic on SOCK_SEQPACKET, so several threads may send), :meth:`recv` one
``recvmsg`` with ``MSG_TRUNC`` so that an oversized packet is seen and dropped
rather than half-read, as ``ea_ipc_recv`` does.  A ckpt_staged carries the
staging memfd as SCM_RIGHTS; fds that arrive on other packets are closed.
"""
from __future__ import annotations

import array
import os
import select
import socket
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _protocol as protocol
from .errors import AgentGone, ProtocolError

__all__ = ["AgentConnection"]

_FDS_MAX = 4  # fds taken off one packet (RECV_FDS_MAX); the rest are closed


class AgentConnection:
    """A SOCK_SEQPACKET socket to the agent.

    ``AgentConnection.from_env()`` adopts ``EA_IPC_FD`` (default 3).  The
    object owns the socket; :meth:`close` closes it.
    """

    def __init__(self, sock: socket.socket) -> None:
        if sock.type != socket.SOCK_SEQPACKET:
            raise ValueError("AgentConnection: fd %d is not a SOCK_SEQPACKET socket" % sock.fileno())
        self.sock = sock

    @classmethod
    def from_fd(cls, fd: int) -> "AgentConnection":
        """Adopt ``fd`` (it is closed with the connection).  Raises OSError if
        it is not a socket, ValueError if not SOCK_SEQPACKET."""
        s = socket.socket(fileno=fd)
        os.set_inheritable(s.fileno(), False)  # a user's subprocess must not hold the agent's end
        return cls(s)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> Optional["AgentConnection"]:
        """The agent's socket named by ``EA_IPC_FD``, or None when this process
        was not started by an agent (no ``EA_IPC_FD`` in the environment)."""
        env = os.environ if environ is None else environ
        v = env.get("EA_IPC_FD")
        if v is None or v == "":
            return None
        try:
            fd = int(v)
        except ValueError:
            raise ValueError("EA_IPC_FD=%r: expected a file descriptor number" % v)
        return cls.from_fd(fd)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, msg: Mapping[str, Any], fd: Optional[int] = None) -> None:
        """Encode and send one message, with ``fd`` attached if given.

        Raises ProtocolError for a message the agent would reject (nothing is
        sent), AgentGone when the agent's end is closed (EPIPE/ECONNRESET),
        OSError for anything else."""
        data = protocol.encode(msg)
        try:
            if fd is None:
                self.sock.sendmsg([data])
            else:
                socket.send_fds(self.sock, [data], [fd])
        except (BrokenPipeError, ConnectionResetError) as e:
            raise AgentGone("send %s: the agent is gone (%s)" % (msg.get("type"), e.strerror))

    def recv_raw(self, timeout: Optional[float] = None) -> Tuple[bytes, List[int]]:
        """One raw packet and the fds that came with it (the caller owns them).

        Raises TimeoutError after ``timeout`` seconds (None: wait forever),
        AgentGone at end of stream (a zero-length packet reads as that, as in
        the agent), ProtocolError for a packet over MAX_MSG (consumed and
        dropped, its fds closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self.sock], [], [], wait)
            if not r:
                raise TimeoutError("no message within %.3f s" % timeout)  # type: ignore[str-format]
            try:
                data, anc, flags, _ = self.sock.recvmsg(
                    protocol.MAX_MSG, socket.CMSG_SPACE(_FDS_MAX * array.array("i").itemsize),
                    socket.MSG_DONTWAIT | socket.MSG_TRUNC | socket.MSG_CMSG_CLOEXEC)
            except BlockingIOError:
                continue
            except (ConnectionResetError, BrokenPipeError) as e:
                raise AgentGone("recv: the agent is gone (%s)" % e.strerror)
            fds: List[int] = []
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    a = array.array("i")
                    a.frombytes(payload[:len(payload) - len(payload) % a.itemsize])
                    fds.extend(a)
            if flags & socket.MSG_TRUNC:
                for f in fds:
                    os.close(f)
                raise ProtocolError("message: more than %d bytes" % protocol.MAX_MSG)
            if not data:
                for f in fds:
                    os.close(f)
                raise AgentGone("the agent closed the connection")
            return data, fds

    def recv(self, timeout: Optional[float] = None) -> Tuple[Dict[str, Any], Optional[int]]:
        """One decoded message and the fd that came with it (or None; extra
        fds are closed).  Raises what :meth:`recv_raw` raises, and
        ProtocolError naming the field for a packet that does not decode (its
        fds closed)."""
        data, fds = self.recv_raw(timeout)
        fd = fds[0] if fds else None
        for f in fds[1:]:
            os.close(f)
        try:
            return protocol.decode(data), fd
        except ProtocolError:
            if fd is not None:
                os.close(fd)
            raise

    def close(self) -> None:
        self.sock.close()
