"""A warm interpreter: imports what a worker will need, waits, then becomes it.

The agent starts this file as ``PYTHON [OPTIONS] _warm.py MODULE…`` with a
control socket (SOCK_SEQPACKET) on the fd named by ``EA_WARM_FD``, ahead of
the generation that will need a worker (agent/job/supervisor_warm.c).
It imports each MODULE (``compute.preload``), says ``ready`` (or ``fail``
with what went wrong) on the socket and waits.  At a generation the agent
sends one packet, the handover, with the worker's stdout and stderr as
SCM_RIGHTS fds (none: keep the ones it has):

    EAW1 \\0 N \\0 ARGV[0] \\0 … ARGV[N-1] \\0 NINTERP \\0 KIND \\0
    M \\0 ENV[0] \\0 … ENV[M-1] \\0 CWD \\0

ARGV is the whole cold command line (``python3 -u train.py --lr 1``), of
which the first NINTERP words are the interpreter and its options; KIND is
``s`` (ARGV[NINTERP] is a script) or ``m`` (``-m``: ARGV[NINTERP+1] is a
module).  The strings are bytes, decoded as Python decodes argv and the
environment (the file system encoding, surrogateescape).

Then this process becomes the worker exactly as ``python3 SCRIPT ARG…``
would have started: stdout/stderr, the working directory, ``os.environ``
(the C environment too, for children), ``sys.argv``, ``sys.orig_argv``,
``sys.path[0]``, a fresh ``__main__`` module with ``__file__`` and
``__loader__`` as CPython sets them (``runpy`` for ``-m``, as ``python -m``
itself does), an uncaught exception printed without this file's frame and
exit status 1, SystemExit as usual.  What cannot be the same is said in
docs/torchrun.md: modules imported before the script ran (``sys.modules``),
and anything a script changes in the environment *before* importing torch
for torch's import to see.

An empty read (the agent closed the socket: the spare is no longer wanted,
or the agent died) ends the process with status 0.
"""

import os
import sys

_FD = os.environ.pop("EA_WARM_FD", None)
# This file's directory (python/elastic_agent/, which holds a torch.py) must
# not shadow anything the preload or the script imports.
if not sys.flags.safe_path and sys.path and sys.path[0] == os.path.dirname(
    os.path.realpath(__file__)
):
    del sys.path[0]

import socket  # noqa: E402  (after the sys.path fix on purpose)


def _send(sock, text):
    try:
        sock.send(text.encode("utf-8", "replace")[:4000])
    except OSError:
        pass


def _decode(data):
    f = data.split(b"\0")
    if len(f) < 2 or f[0] != b"EAW1":
        raise ValueError("not a handover packet")
    i = 1
    n = int(f[i])
    argv = [os.fsdecode(w) for w in f[i + 1 : i + 1 + n]]
    i += 1 + n
    ninterp = int(f[i])
    kind = f[i + 1].decode()
    m = int(f[i + 2])
    env = f[i + 3 : i + 3 + m]
    cwd = f[i + 3 + m]
    if kind not in ("s", "m") or not 0 < ninterp < len(argv) or len(f) < i + 4 + m:
        raise ValueError("malformed handover packet")
    return argv, ninterp, kind, env, cwd


def _wait_for_master(limit_s=0.5):
    """Restart mode, a rank other than 0: wait (at most limit_s) until rank
    0's store listens on MASTER_ADDR:MASTER_PORT, by connecting and closing.

    Started warm, every rank reaches init_process_group within milliseconds
    of the handover, and one that connects before rank 0's TCPStore listens
    is refused and retried by torch only after its backoff (0.4-0.7 s
    measured with torch 2.15.0).  Rank 0 listens some 10-20 ms after its
    handover; this wait turns that race into those milliseconds.  A bare
    connection that closes is nothing to the store.  A program whose rank 0
    never listens there loses limit_s, about what the backoff would have
    cost; a cold start spends seconds importing, so it never races."""
    e = os.environ
    if e.get("TORCHELASTIC_USE_AGENT_STORE") != "False" or e.get("RANK", "0") == "0":
        return
    try:
        addr = (e["MASTER_ADDR"], int(e["MASTER_PORT"]))
    except (KeyError, ValueError):
        return
    import time

    end = time.monotonic() + limit_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        try:
            socket.create_connection(addr, timeout=min(left, 0.1)).close()
            return
        except OSError:
            time.sleep(0.005)


def _become(argv, ninterp, kind, env, cwd):
    os.chdir(cwd)
    os.environb.clear()
    for kv in env:
        k, sep, v = kv.partition(b"=")
        if sep and k:
            os.environb[k] = v
    _wait_for_master()
    sys.orig_argv[:] = argv
    prog = argv[ninterp:]
    import importlib.machinery
    import types

    # A fresh __main__, as the interpreter's own before it runs anything
    # (this file's names must not be the script's).
    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=__builtins__)
    sys.modules["__main__"] = main
    if kind == "m":
        # sys.path[0]: the working directory (none under -P or -I); then
        # exactly what `python -m` runs.
        if not sys.flags.safe_path:
            sys.path.insert(0, os.getcwd())
        sys.argv[:] = ["-m"] + prog[2:]
        import runpy

        runpy._run_module_as_main(prog[1], alter_argv=True)
        return
    # sys.path[0] as CPython computes it for a script: its directory with
    # symbolic links resolved (none under -P or -I).
    script = prog[0]
    path = os.path.abspath(script)
    if not sys.flags.safe_path:
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    sys.argv[:] = prog
    main.__dict__.update(
        __file__=path,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", path),
        __spec__=None,
        __package__=None,
    )
    try:
        with open(path, "rb") as fh:
            source = fh.read()
    except OSError as e:
        # what `python3 missing.py` says, with its status
        sys.stderr.write(
            "%s: can't open file %r: [Errno %d] %s\n"
            % (sys.orig_argv[0], path, e.errno, e.strerror)
        )
        sys.stderr.flush()
        os._exit(2)
    code = compile(source, path, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _run(argv, ninterp, kind, env, cwd):
    """_become, with an uncaught exception ended as the interpreter's own
    top level ends it: the hook (the script's, if it set one) is given the
    traceback without this file's frames, then status 1."""
    try:
        _become(argv, ninterp, kind, env, cwd)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        # CPython prints the exception's own __traceback__: set it there.
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            # CPython ≥ 3.8 ends by SIGINT after an uncaught Ctrl-C
            import atexit
            import signal

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1) from None


def _main():
    if _FD is None:
        sys.exit("_warm.py is started by elastic-agent (EA_WARM_FD is not set)")
    sock = socket.socket(fileno=int(_FD))
    import importlib

    failed = None
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 — any failure: start cold
            failed = "%s: %s: %s" % (name, type(e).__name__, e)
            break
    _send(sock, "fail " + failed if failed else "ready")
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    except OSError:
        os._exit(0)
    sock.close()
    if not data:
        os._exit(0)
    argv, ninterp, kind, env, cwd = _decode(data)
    if len(fds) == 2:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
    elif fds:
        for fd in fds:
            os.close(fd)
    del globals()["_FD"]
    _run(argv, ninterp, kind, env, cwd)


_main()
