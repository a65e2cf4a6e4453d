#!/usr/bin/env python3
"""bench/reform_pytorch.py — what the library's re-formation shortcuts save,
measured on torch itself: W gloo processes on 127.0.0.1 re-form a process
group again and again, alternating each round between torch's own way and
the library's (elastic_agent/torch.py), and time the three places they
differ:

  init      init_process_group over a fresh PrefixStore (the same both ways
            on torch 2.x: no closing store-based barrier unless
            TORCH_DIST_INIT_BARRIER=1; torch 1.13's polled every 10 ms and the
            library skipped it)
  size      the state broadcast's length: a broadcast of its own / carried
            in the sync allreduce (one collective fewer)
  ddp       DistributedDataParallel(model): with its shape check and
            parameter broadcast / without (init_sync=False, as
            TorchGeneration.ddp does for the state's model)

Every round starts at a store key rank 0 sets, so the ranks begin together as
at a COMMIT.  Prints, per variant, the median and max over the rounds of the
slowest rank's time for each part (ms), and the load average.

usage: bench/reform_pytorch.py [--world 4] [--rounds 40] [--mib 0.01]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time


def rank_main(rank, world, port, rounds, nbytes):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    master = dist.TCPStore("127.0.0.1", port, world, rank == 0, wait_for_workers=False)
    model = torch.nn.Linear(max(1, nbytes // 8), 1)
    out = []
    for r in range(rounds):
        lib = r % 2 == 1
        if rank == 0:
            time.sleep(0.05)
            master.set("go/%d" % r, "1")
        master.wait(["go/%d" % r])
        t0 = time.perf_counter()
        store = dist.PrefixStore("r/%d/" % r, master)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
        t1 = time.perf_counter()
        v = torch.zeros(8 if lib else 7, dtype=torch.int64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        if not lib:
            n = torch.tensor([nbytes], dtype=torch.int64)
            dist.broadcast(n, 0)
        buf = torch.zeros(nbytes, dtype=torch.uint8)
        dist.broadcast(buf, 0)
        t2 = time.perf_counter()
        d = DDP(model, init_sync=not lib)
        t3 = time.perf_counter()
        del d
        dist.destroy_process_group()
        out.append("%d %d %.3f %.3f %.3f" % (r, lib, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3))
    print("\n".join(out), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--mib", type=float, default=0.01, help="state (and model) size broadcast")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    nbytes = max(8, int(a.mib * 2**20))
    if a.rank is not None:
        return rank_main(a.rank, a.world, a.port, a.rounds, nbytes)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    load0 = open("/proc/loadavg").read().split()[:3]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port), "--world",
                               str(a.world), "--rounds", str(a.rounds), "--mib", str(a.mib)],
                              stdout=subprocess.PIPE, text=True, env=env) for r in range(a.world)]
    outs = [pr.communicate(timeout=600)[0] for pr in procs]
    if any(pr.returncode for pr in procs):
        print("reform_pytorch: a rank failed", file=sys.stderr)
        return 1
    per = {}  # (round, lib) -> [max over ranks of each part]
    for o in outs:
        for line in o.strip().splitlines():
            r, lib, *ms = line.split()
            k = (int(r), int(lib))
            cur = per.setdefault(k, [0.0, 0.0, 0.0])
            per[k] = [max(x, float(y)) for x, y in zip(cur, ms)]
    load1 = open("/proc/loadavg").read().split()[:3]
    print("reform_pytorch: world %d, %d rounds, state %d bytes, torch gloo on 127.0.0.1; load %s -> %s"
          % (a.world, a.rounds, nbytes, " ".join(load0), " ".join(load1)))
    print("slowest rank per round, ms: median (max)   [first 2 rounds of each dropped: warm-up]")
    for lib, name in ((0, "torch's own"), (1, "elastic_agent")):
        rows = [v for (r, l), v in sorted(per.items()) if l == lib and r >= 4]
        cells = []
        for i, part in enumerate(("init", "sync+size", "ddp")):
            xs = [row[i] for row in rows]
            cells.append("%s %.1f (%.1f)" % (part, statistics.median(xs), max(xs)))
        tot = [sum(row) for row in rows]
        print("  %-14s %s   sum %.1f (%.1f)" % (name, "   ".join(cells), statistics.median(tot), max(tot)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
