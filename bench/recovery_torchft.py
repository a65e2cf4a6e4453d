"""bench/recovery_pytorch.sh's and bench/goodput.sh's TorchFT peer: the model,
data, optimizer and step sleep of bench/recovery_pytorch_ddp.py
(examples/torchrun_ddp.py: nn.Linear(8, 1), SGD lr 0.05, a fixed global batch
of 24 per step, --step-sleep after each step) driven by TorchFT's own API as
its train_ddp.py example does: a Manager per replica group with
ProcessGroupGloo, torchft.DistributedDataParallel, torchft.Optimizer (the
OptimizerWrapper: zero_grad() starts the quorum, step() steps only if the
Manager says the step commits), the model and optimizer state as the
Manager's state_dict/load_state_dict (a joiner heals from a live peer over
the Manager's HTTP checkpoint transport; there is no checkpoint file).

One replica group of one rank per node, started as TorchFT's README starts
one: `torchrun --nnodes=1 --nproc_per_node=1 --standalone … recovery_torchft.py`
(torchrun hosts the group's TCPStore the Manager needs and restarts a killed
worker), with TORCHFT_LIGHTHOUSE=http://127.0.0.1:PORT and REPLICA_GROUP_ID.

It prints the lines bench/recovery_pytorch.py reads ("train rank=R world=W …
t=<time.time()>"), like bench/recovery_pytorch_lib.py: rank = the replica
group's rank in the current quorum, world = the quorum's participants;
"phase" is printed once per quorum (a new quorum id: every membership
change), so the harness times "first committed step at the new world size in
a quorum formed after the fault"; "step=N" only for a step the Manager
committed (N = manager.current_step(), the step count of the model), and
"discard step=N" for one it did not (its gradients thrown away).

--tuned: the settings of TorchFT's train_ddp.py example (ProcessGroupGloo
timeout 5 s, Manager timeout 30 s); without it the library's defaults
(60 s and 60 s).
"""
import time
T_SCRIPT = time.time()
import argparse
import logging
import os
import sys
from datetime import timedelta

import torch
from torch import nn, optim

from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

GLOBAL_BATCH = 24
FEATURES = 8

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--min-replicas", type=int, default=1)
p.add_argument("--tuned", action="store_true")
a = p.parse_args()

logging.basicConfig(level=logging.INFO if os.environ.get("EA_TORCHFT_INFO") else logging.WARNING)
torch.set_num_threads(1)
REPLICA_GROUP_ID = int(os.environ.get("REPLICA_GROUP_ID", 0))

torch.manual_seed(0)
m = nn.Linear(FEATURES, 1)


def load_state_dict(sd):
    m.load_state_dict(sd["model"])
    opt.load_state_dict(sd["optim"])


def state_dict():
    return {"model": m.state_dict(), "optim": opt.state_dict()}


if a.tuned:
    pg = ProcessGroupGloo(timeout=timedelta(seconds=5))
    manager = Manager(pg=pg, min_replica_size=a.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"bench_{REPLICA_GROUP_ID}",
                      timeout=timedelta(seconds=30))
else:
    pg = ProcessGroupGloo()
    manager = Manager(pg=pg, min_replica_size=a.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"bench_{REPLICA_GROUP_ID}")
net = DistributedDataParallel(manager, m)
opt = Optimizer(manager, optim.SGD(m.parameters(), lr=0.05))


def batch(step, rank, world):
    """This rank's share of the step's fixed global batch (as recovery_pytorch_ddp.py)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0
    lo, hi = rank * GLOBAL_BATCH // world, (rank + 1) * GLOBAL_BATCH // world
    return x[lo:hi], y[lo:hi]


def log(rank, world, msg):
    print(f"train rank={rank} world={world} {msg} t={time.time():.3f}", flush=True)


quorum = None
while manager.current_step() < a.steps:
    step = manager.current_step()
    opt.zero_grad()  # starts the quorum (async) for this step
    try:
        world = manager.num_participants()
        rank = manager.participating_rank()
    except Exception as e:  # the quorum failed (e.g. the Lighthouse is gone)
        log("?", "?", f"quorum-error step={step} {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        time.sleep(a.step_sleep or 0.05)
        continue
    r = rank if rank is not None else 0
    w = max(world, 1)
    x, y = batch(step, r, w)
    loss = nn.functional.mse_loss(net(x), y, reduction="sum") * w / GLOBAL_BATCH
    loss.backward()
    opt.step()  # steps the optimizer only if the Manager commits this step
    qid = getattr(manager, "_quorum_id", -1)
    if manager.current_step() > step:
        if qid != quorum:
            quorum = qid
            t = time.time()
            log(r, world, f"phase pid={os.getpid()} exec={t:.3f} script={T_SCRIPT:.3f} torch={t:.3f} "
                f"imported={t:.3f} pg={t:.3f} ckpt={t:.3f} ddp={t:.3f} quorum={qid}")
            log(r, world, f"start step={manager.current_step() - 1} quorum={qid}")  # after a heal: the healed step
        log(r, world, f"step={manager.current_step()} loss={loss.item() / w:.6f}")
    else:
        log(r, world, f"discard step={step + 1} quorum={qid}")
    if a.step_sleep:
        time.sleep(a.step_sleep)
manager.shutdown()
sys.exit(0)
