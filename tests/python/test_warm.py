"""The warm launcher (python/elastic_agent/_warm.py) driven as the agent
drives it: started with a control socket on EA_WARM_FD and modules to
preload, it says ready (or fail), then becomes the program the handover
names.  The handover bytes are built exactly as agent/job/warm.c builds
them (tests/unit/test_warm.c pins that encoder to the same layout).

Each case starts a real interpreter (sys.executable) and waits on it with
a deadline."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..", "..", "python", "elastic_agent", "_warm.py")
DEADLINE = 60


def handover(argv, ninterp, kind, env, cwd):
    f = [b"EAW1", str(len(argv)).encode()]
    f += [os.fsencode(a) for a in argv]
    f += [str(ninterp).encode(), kind.encode(), str(len(env)).encode()]
    f += [os.fsencode(e) for e in env]
    f.append(os.fsencode(cwd))
    return b"\0".join(f) + b"\0"


def test_the_bytes_are_warm_c_s():
    # the same packet as tests/unit/test_warm.c's handover_bytes
    want = (
        b"EAW1\x004\x00python3\x00-u\x00t.py\x00a b\x002\x00s\x002\x00"
        b"RANK=1\x00X=\x00/w d\x00"
    )
    assert handover(["python3", "-u", "t.py", "a b"], 2, "s", ["RANK=1", "X="], "/w d") == want


class Spare:
    """A launcher process with our end of its control socket."""

    def __init__(self, tmp_path, preload=(), opts=()):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, EA_WARM_FD=str(theirs.fileno()))
        self.out = open(tmp_path / "spare.out", "wb")
        self.p = subprocess.Popen(
            [sys.executable, *opts, os.path.abspath(LAUNCHER), *preload],
            env=env,
            pass_fds=[theirs.fileno()],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            cwd=str(tmp_path),
        )
        theirs.close()
        self.sock.settimeout(DEADLINE)

    def said(self):
        return self.sock.recv(4096).decode()

    def take(self, argv, ninterp, kind, env, cwd, fds=()):
        socket.send_fds(self.sock, [handover(argv, ninterp, kind, env, cwd)], list(fds))
        self.sock.close()

    def wait(self):
        return self.p.wait(timeout=DEADLINE)


def script(tmp_path, body, name="prog.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def run_warm(tmp_path, argv_tail, body, env_extra=(), kind="s", opts=()):
    prog = script(tmp_path, body)
    s = Spare(tmp_path, preload=["json"], opts=opts)
    assert s.said() == "ready"
    out = open(tmp_path / "worker.out", "wb")
    err = open(tmp_path / "worker.err", "wb")
    env = ["PATH=" + os.environ.get("PATH", ""), "FROM_HANDOVER=yes", *env_extra]
    argv = [sys.executable, *opts, prog, *argv_tail] if kind == "s" else argv_tail
    s.take(argv, 1 + len(opts), kind, env, str(tmp_path), fds=[out.fileno(), err.fileno()])
    out.close()
    err.close()
    rc = s.wait()
    return rc, (tmp_path / "worker.out").read_text(), (tmp_path / "worker.err").read_text()


def test_becomes_the_script(tmp_path):
    rc, out, err = run_warm(
        tmp_path,
        ["a", "b c"],
        """
        import os, sys
        print(__name__, os.path.basename(__file__), sys.argv[1:], os.environ.get("FROM_HANDOVER"),
              os.environ.get("EA_WARM_FD"), "json" in sys.modules, sys.path[0] == os.path.dirname(__file__))
        print("to stderr", file=sys.stderr)
        sys.exit(7)
        """,
    )
    assert rc == 7
    assert out.strip() == "__main__ prog.py ['a', 'b c'] yes None True True", out
    assert err.strip() == "to stderr"


def test_an_uncaught_exception_shows_no_launcher_frame(tmp_path):
    rc, out, err = run_warm(
        tmp_path,
        [],
        """
        def f():
            raise RuntimeError("boom")
        f()
        """,
    )
    assert rc == 1
    assert "RuntimeError: boom" in err
    assert "_warm.py" not in err, err
    assert err.startswith("Traceback (most recent call last):\n  File \"%s\"" % (tmp_path / "prog.py")), err


def test_the_module_form(tmp_path):
    script(tmp_path, "import sys\nprint(__name__, sys.argv[1:])\nraise SystemExit(3)\n", "mymod.py")
    s = Spare(tmp_path, preload=["json"])
    assert s.said() == "ready"
    out = open(tmp_path / "o", "wb")
    s.take([sys.executable, "-m", "mymod", "x"], 1, "m", ["PATH=/usr/bin:/bin"], str(tmp_path),
           fds=[out.fileno(), out.fileno()])
    out.close()
    assert s.wait() == 3
    assert (tmp_path / "o").read_text().strip() == "__main__ ['x']"


def test_a_failed_preload_says_why_and_still_runs_a_handover(tmp_path):
    s = Spare(tmp_path, preload=["no_such_module_xyz", "json"])
    said = s.said()
    assert said.startswith("fail no_such_module_xyz: ModuleNotFoundError"), said
    prog = script(tmp_path, "print('ran')\n")
    out = open(tmp_path / "o", "wb")
    s.take([sys.executable, prog], 1, "s", [], str(tmp_path), fds=[out.fileno(), out.fileno()])
    out.close()
    assert s.wait() == 0
    assert (tmp_path / "o").read_text().strip() == "ran"


def test_closed_without_a_handover_ends_quietly(tmp_path):
    s = Spare(tmp_path, preload=["json"])
    assert s.said() == "ready"
    s.sock.close()
    assert s.wait() == 0
    assert (tmp_path / "spare.out").read_text() == ""


def test_a_missing_script_fails_as_python_does(tmp_path):
    s = Spare(tmp_path)
    assert s.said() == "ready"
    err = open(tmp_path / "e", "wb")
    missing = str(tmp_path / "missing.py")
    s.take([sys.executable, missing], 1, "s", [], str(tmp_path), fds=[err.fileno(), err.fileno()])
    err.close()
    assert s.wait() == 2
    cold = subprocess.run([sys.executable, missing], capture_output=True, text=True, timeout=DEADLINE)
    assert cold.returncode == 2
    assert (tmp_path / "e").read_text() == cold.stderr


@pytest.mark.parametrize("opts", [(), ("-I",)])
def test_sys_path_zero_as_cold(tmp_path, opts):
    body = "import sys, json\nprint(json.dumps(sys.path[:1]))\n"
    rc, out, _ = run_warm(tmp_path, [], body, opts=opts)
    assert rc == 0
    prog = str(tmp_path / "prog.py")
    cold = subprocess.run([sys.executable, *opts, prog], capture_output=True, text=True,
                          timeout=DEADLINE, cwd=str(tmp_path))
    assert out == cold.stdout


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("listen_after", [0.2, None])
def test_a_rank_waits_for_rank_0s_store(tmp_path, listen_after):
    """Restart mode: a rank other than 0 starts its script once MASTER_PORT
    listens (no TCPStore connect backoff), or after 0.5 s if it never does."""
    import threading
    import time

    port = _free_port()
    prog = script(tmp_path, "import time\nprint(time.time())\n")
    s = Spare(tmp_path, preload=["json"])
    assert s.said() == "ready"
    listening = {}
    lsock = socket.socket()

    def listen():
        time.sleep(listen_after)
        lsock.bind(("127.0.0.1", port))
        lsock.listen(4)
        listening["at"] = time.time()

    if listen_after is not None:
        threading.Thread(target=listen).start()
    out = open(tmp_path / "o", "wb")
    env = ["RANK=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=%d" % port,
           "TORCHELASTIC_USE_AGENT_STORE=False"]
    t0 = time.time()
    s.take([sys.executable, prog], 1, "s", env, str(tmp_path), fds=[out.fileno(), out.fileno()])
    out.close()
    assert s.wait() == 0
    lsock.close()
    started = float((tmp_path / "o").read_text().split()[0])
    if listen_after is None:
        assert 0.5 <= started - t0 < 5, started - t0
    else:
        assert started >= listening["at"], (started, listening)
        assert started - listening["at"] < 0.4, started - listening["at"]
