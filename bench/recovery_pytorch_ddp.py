#!/usr/bin/env python3
"""bench/recovery_pytorch.sh's copy of examples/torchrun_ddp.py, with timestamps.

The same script, changed only so the benchmark can see time: every log line
ends with t=<time.time()>, a "phase" line gives the wall-clock moments of the
process's exec (from /proc), the script's first line, `import torch` done, its other
imports done, init_process_group done (gloo), the checkpoint loaded and DDP built, and
--gloo-timeout S is passed to init_process_group (torch's default, 1800 s,
when absent), so that torchrun's side of a SIGSTOP can end in this life.
examples/torchrun_ddp.py stays the unmodified torchrun script; everything
below the next paragraph is its text.

A plain torchrun-style DDP training script: nothing in it knows elastic-agent.

Run it under torchrun:

    torchrun --nnodes=1:4 --nproc_per_node=2 --rdzv_backend=c10d \
        --rdzv_endpoint=HOST:29400 examples/torchrun_ddp.py --ckpt /shared/ckpt

or under elastic-agent, unchanged:

    elastic-agent run --join HOST:7000 -- python3 examples/torchrun_ddp.py --ckpt /shared/ckpt

It does what a torchrun script does (docs/torchrun.md): reads RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/MASTER_PORT through init_process_group("env://") with
gloo, wraps a tiny model in DistributedDataParallel, saves its own checkpoint
(torch.save, rank 0, every --save-every steps, written to a temporary file and
renamed), resumes from it at start, and uses torchelastic's @record so a crash
leaves its traceback in TORCHELASTIC_ERROR_FILE.  The global batch is fixed
and split over the ranks, so the loss does not depend on the world size.

Flags used by tests/e2e/test_torchrun.sh and bench/recovery_pytorch.sh:
--env-dir (write this process's torchrun variables to a JSON file there),
--fail-once RANK:STEP:MARKER (that rank raises once, at that step, if MARKER
does not exist yet), --always-fail RANK:STEP, --finish-file PATH (stop cleanly
at the next step once PATH exists), --step-sleep S (seconds per step).
"""
import time
T_SCRIPT = time.time()  # the script's first line, before any import
import argparse
import json
import os
import sys


def _exec_time():
    """Wall-clock time this process was exec'd: /proc's start time in ticks
    since boot against /proc/uptime now (10 ms resolution)."""
    try:
        with open("/proc/self/stat") as f:
            start = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return time.time() - (up - start / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return float("nan")


T_EXEC = _exec_time()
import torch
T_TORCH = time.time()
from datetime import timedelta
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
T_IMPORTED = time.time()

ENV_NAMES = [
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
    "EA_GENERATION", "EA_NODE_NAME", "EA_DATA_DIR",
]

GLOBAL_BATCH = 24
FEATURES = 8


def log(msg):
    rank = os.environ.get("RANK", "?")
    world = os.environ.get("WORLD_SIZE", "?")
    print(f"train rank={rank} world={world} {msg} t={time.time():.3f}", flush=True)


def batch(step, rank, world):
    """This rank's share of the step's fixed global batch (same data whatever the world)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0
    lo, hi = rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world
    return x[lo:hi], y[lo:hi]


def save(path, model, opt, step):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def parse_rank_step(spec):
    parts = spec.split(":")
    return int(parts[0]), int(parts[1]), (parts[2] if len(parts) > 2 else None)


@record
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--ckpt", default="ckpt")
    p.add_argument("--env-dir", default="")
    p.add_argument("--fail-once", default="")
    p.add_argument("--always-fail", default="")
    p.add_argument("--finish-file", default="")
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--gloo-timeout", type=float, default=1800.0)
    a = p.parse_args()

    t0 = time.time()
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=a.gloo_timeout))
    t_pg = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.env_dir:
        os.makedirs(a.env_dir, exist_ok=True)
        env = {k: os.environ.get(k) for k in ENV_NAMES}
        env["pid"] = os.getpid()
        path = os.path.join(a.env_dir, f"env-{os.environ.get('EA_NODE_NAME', 'x')}-{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(env, f)
        os.replace(path + ".tmp", path)

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs(a.ckpt, exist_ok=True)
    path = os.path.join(a.ckpt, "ckpt.pt")
    start = 0
    if os.path.exists(path):
        st = torch.load(path)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
    t_ckpt = time.time()
    ddp = DDP(model)
    log(f"phase pid={os.getpid()} exec={T_EXEC:.3f} script={T_SCRIPT:.3f} torch={T_TORCH:.3f} imported={T_IMPORTED:.3f} "
        f"pg={t_pg:.3f} ckpt={t_ckpt:.3f} ddp={time.time():.3f}")
    log(f"start step={start} resumed={'yes' if start else 'no'} "
        f"restart_count={os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
        f"init_s={time.time() - t0:.2f}")

    once = parse_rank_step(a.fail_once) if a.fail_once else None
    always = parse_rank_step(a.always_fail) if a.always_fail else None
    step = start
    while step < a.steps:
        if once and rank == once[0] and step == once[1] and not os.path.exists(once[2]):
            open(once[2], "w").close()
            raise RuntimeError(f"injected failure at step {step} (once)")
        if always and rank == always[0] and step >= always[1]:
            raise RuntimeError(f"always failing at step {step}")
        x, y = batch(step, rank, world)
        opt.zero_grad()
        # sum over this rank's samples, averaged over the global batch: DDP averages
        # gradients over the world, so scale by world to keep the global mean
        loss = torch.nn.functional.mse_loss(ddp(x), y, reduction="sum") * world / GLOBAL_BATCH
        loss.backward()
        opt.step()
        step += 1
        flag = torch.zeros(1)
        if rank == 0 and a.finish_file and os.path.exists(a.finish_file):
            flag[0] = 1
        dist.all_reduce(flag)  # every rank agrees on stopping early
        log(f"step={step} loss={loss.item() / world:.6f}")
        if rank == 0 and (step % a.save_every == 0 or step == a.steps or flag[0] > 0):
            save(path, model, opt, step)
        if flag[0] > 0:
            break
        if a.step_sleep:
            time.sleep(a.step_sleep)
    dist.barrier()
    log(f"done step={step}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
