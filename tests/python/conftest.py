"""Shared pieces of the package's tests: the import path, a fake agent on a
socketpair, worker processes that are always killed, and deadline waits.

Every wait here has a deadline (no sleeping to synchronise), and every
process a test starts is killed by the fixture that started it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

from elastic_agent._connection import AgentConnection  # noqa: E402

# Every test's seed is printed and can be replayed: EA_SEED=… pytest …
SEED = int(os.environ.get("EA_SEED", str(int(time.time()) % 100000)))


def pytest_report_header(config):
    return "elastic_agent tests: EA_SEED=%d" % SEED


def wait_for(cond: Callable[[], Any], timeout: float, what: str, poll: float = 0.005) -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1f s waiting for %s" % (timeout, what))
        time.sleep(poll)


class FakeAgent:
    """The agent's end of one worker's socketpair: sends agent→worker
    messages with the package's encoder (checked byte-for-byte against the
    agent's in test_protocol) and receives the worker's."""

    def __init__(self) -> None:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = a
        self.child = b  # the worker's end
        self.conn = AgentConnection(a)
        self.log: List[Dict[str, Any]] = []

    def send(self, **msg: Any) -> None:
        self.conn.send(msg)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendmsg([data])

    def recv(self, timeout: float = 10.0) -> Tuple[Dict[str, Any], Optional[int]]:
        m, fd = self.conn.recv(timeout)
        self.log.append(m)
        return m, fd

    def expect(self, type_: str, timeout: float = 10.0, skip: Tuple[str, ...] = (),
               keep_fd: bool = False) -> Dict[str, Any]:
        """The next message of ``type_``; messages of the ``skip`` types are
        passed over, anything else fails the test."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %s within %.1f s (got %s)" % (type_, timeout, self.log[-3:]))
            try:
                m, fd = self.recv(left)
            except TimeoutError:
                continue
            if m["type"] == type_:
                if keep_fd:
                    m["_fd"] = fd
                elif fd is not None:
                    os.close(fd)
                return m
            if fd is not None:
                os.close(fd)
            assert m["type"] in skip, "expected %s, got %r" % (type_, m)

    def close(self) -> None:
        for s in (self.sock, self.child):
            try:
                s.close()
            except OSError:
                pass


@pytest.fixture
def agent():
    a = FakeAgent()
    yield a
    a.close()


class Procs:
    """Worker processes started with a FakeAgent each; all killed at the end."""

    def __init__(self, log_dir: str) -> None:
        self.procs: List[subprocess.Popen] = []
        self.log_dir = log_dir
        self.logs: List[str] = []

    def start(self, script: str, args: List[str], env: Dict[str, str], fa: FakeAgent,
              local_rank: int = 0) -> subprocess.Popen:
        child = fa.child.fileno()
        e = dict(os.environ)
        e.update(env)
        e.update({"EA_IPC_FD": "3", "EA_LOCAL_RANK": str(local_rank), "EA_COMM_BIND": "127.0.0.1:0",
                  "PYTHONPATH": PYDIR, "OMP_NUM_THREADS": "1"})
        e.pop("GLOO_SOCKET_IFNAME", None)  # the library picks the interface of EA_COMM_BIND

        def to_fd3() -> None:  # the worker finds the agent's socket on fd 3
            os.dup2(child, 3)
            os.setpgid(0, 0)  # its own process group, as the agent starts workers

        path = os.path.join(self.log_dir, "worker-%d.log" % len(self.procs))
        with open(path, "wb") as out:
            p = subprocess.Popen([sys.executable, script] + args, env=e, preexec_fn=to_fd3,
                                 close_fds=False, stdout=out, stderr=subprocess.STDOUT)
        fa.child.close()  # the worker holds it now
        self.procs.append(p)
        self.logs.append(path)
        return p

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass

    def dump(self) -> None:
        """The workers' output (shown by pytest when a test failed)."""
        for path, p in zip(self.logs, self.procs):
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
            print("---- %s (pid %d, status %s), last lines:" % (os.path.basename(path), p.pid, p.returncode))
            print("\n".join(lines[-25:]))


@pytest.fixture
def procs(tmp_path):
    ps = Procs(str(tmp_path))
    yield ps
    ps.kill_all()
    ps.dump()
