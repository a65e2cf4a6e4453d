"""Writes what a restart-mode worker can see of how it was started to
$EA_WARM_DUMP_DIR/rank<RANK>.json, for tests/e2e/test_warm.sh, which runs it
started warm (from a spare interpreter) and cold and compares the two.

Seen: the environment, sys.argv and sys.orig_argv, __name__, __file__ and
the rest of __main__'s own names, sys.path, the working directory,
sys.executable, sys.flags, the disposition of every signal, stdin/stdout/
stderr (kind, buffering, encoding), the open file descriptors, the process
group and session, the umask, and what a multiprocessing "spawn" child sees
(its sys.executable, sys.path, __main__ as __mp_main__, a class of this
script round-tripped through pickle).  It prints a line to stdout and one
to stderr (the test finds them in the generation's output files).

--fail: rank 1 raises ValueError inside torchelastic's @record (its error
file and exit status are compared too); --exit N: exit with status N.
"""
import json
import multiprocessing
import os
import signal
import stat
import sys

from torch.distributed.elastic.multiprocessing.errors import record


class Probe:
    """Defined in __main__: a spawn child must unpickle it."""

    def __init__(self, v):
        self.v = v


def child_view(q, probe):
    main = sys.modules["__main__"]
    q.put(
        {
            "executable": sys.executable,
            "path": sys.path[:3],
            "main_name": getattr(main, "__name__", None),
            "main_file": getattr(main, "__file__", None),
            "cwd": os.getcwd(),
            "probe": probe.v,
            "rank": os.environ.get("RANK"),
        }
    )


def fd_kind(fd):
    try:
        m = os.fstat(fd).st_mode
    except OSError:
        return None
    for name in ("S_ISSOCK", "S_ISFIFO", "S_ISCHR", "S_ISREG", "S_ISDIR"):
        if getattr(stat, name)(m):
            return name[4:]
    return "other"


def stream(f):
    return {
        "fileno": f.fileno(),
        "kind": fd_kind(f.fileno()),
        "isatty": f.isatty(),
        "line_buffering": f.line_buffering,
        "write_through": getattr(f, "write_through", None),
        "encoding": f.encoding,
        "errors": f.errors,
    }


def signals():
    out = {}
    for s in sorted(signal.valid_signals()):
        try:
            h = signal.getsignal(s)
        except (ValueError, OSError):
            continue
        out[str(int(s))] = repr(h)
    return out


@record
def main():
    rank = int(os.environ["RANK"])
    main_mod = sys.modules["__main__"]
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child_view, args=(q, Probe(rank)))
    p.start()
    child = q.get(timeout=120)
    p.join()
    um = os.umask(0)
    os.umask(um)
    dump = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "name": __name__,
        "file": __file__,
        "main_names": sorted(k for k in vars(main_mod) if k.startswith("__")),
        "loader": type(main_mod.__loader__).__name__,
        "spec": None if main_mod.__spec__ is None else (main_mod.__spec__.name, main_mod.__spec__.origin),
        "package": repr(main_mod.__package__),
        "cached": repr(getattr(main_mod, "__cached__", "absent")),
        "path": sys.path,
        "cwd": os.getcwd(),
        "executable": sys.executable,
        "flags": repr(sys.flags),
        "signals": signals(),
        "stdin": fd_kind(0),
        "stdout": stream(sys.stdout),
        "stderr": stream(sys.stderr),
        "fds": sorted(int(x) for x in os.listdir("/proc/self/fd") if int(x) < 10),
        "pgrp_is_pid": os.getpgrp() == os.getpid(),
        "sid_is_pid": os.getsid(0) == os.getpid(),
        "umask": um,
        "child": child,
        "child_exitcode": p.exitcode,
    }
    path = os.path.join(os.environ["EA_WARM_DUMP_DIR"], "rank%d.json" % rank)
    with open(path, "w") as f:
        json.dump(dump, f, sort_keys=True, indent=1)
    print("warm_dump rank %d: stdout" % rank)
    print("warm_dump rank %d: stderr" % rank, file=sys.stderr)
    if "--fail" in sys.argv and rank == 1:
        raise ValueError("warm_dump: rank 1 fails on purpose")
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))


if __name__ == "__main__":
    main()
