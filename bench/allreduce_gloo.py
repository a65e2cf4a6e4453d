#!/usr/bin/env python3
"""bench/allreduce_gloo.py — the baseline for bench/allreduce.c: torch.distributed
allreduce over gloo, W rank processes on loopback, float32 sum, the same sizes
and the same method (warm-up, barrier before each op, slowest rank's time per
op, median over ops; algbw = bytes/time, busbw = algbw·2(W−1)/W; cpu_us = CPU
time per op, all ranks and all their threads, from getrusage).  Prints one
JSON object like `build/bench/allreduce --json`.

    $EA_PYTHON bench/allreduce_gloo.py [-w W] [--min BYTES] [--max BYTES]
"""
import argparse
import json
import os
import resource
import socket
import statistics
import sys
import time


def iters_for(nbytes):
    # the same rule as bench/allreduce.c
    it = (1 << 30) // max(nbytes, 1)
    return max(8, min(60, it))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def rank_main(rank, world, port, lo, hi, out_q):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    results = []
    buf = torch.zeros(hi // 4, dtype=torch.float32)
    nbytes = lo
    while nbytes <= hi:
        n = nbytes // 4
        t = buf[:n]
        t.fill_(1.0)
        dist.all_reduce(t)  # warm-up and check
        if t[0].item() != world or t[n - 1].item() != world:
            raise SystemExit(f"rank {rank}: wrong result at {nbytes} bytes")
        t.zero_()
        times = []
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(iters_for(nbytes)):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            times.append(dt.item())
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = torch.tensor([(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
                            / len(times)], dtype=torch.float64)
        dist.all_reduce(cpu)  # CPU per op, all ranks (gloo's threads included)
        med = statistics.median(times)
        alg = nbytes / med / 1e9
        results.append({"bytes": nbytes, "iters": len(times), "time_us": med * 1e6,
                         "algbw_gbps": alg, "busbw_gbps": alg * 2 * (world - 1) / world,
                         "cpu_us": cpu.item() * 1e6})
        nbytes *= 4
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        out_q.put(results)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-w", type=int, default=2)
    ap.add_argument("--min", default="1K")
    ap.add_argument("--max", default="256M")
    a = ap.parse_args()
    lo, hi = parse_size(a.min), parse_size(a.max)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the rendezvous store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, a.w, port, lo, hi, q)) for r in range(a.w)]
    for p in procs:
        p.start()
    results = None
    try:
        results = q.get(timeout=1800)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    import torch
    print(json.dumps({"impl": "gloo", "torch": torch.__version__, "world": a.w,
                      "results": results}, indent=1))
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
