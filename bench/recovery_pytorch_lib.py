"""bench/recovery_pytorch.sh's in-place variant: the model, data, optimizer
and step sleep of bench/recovery_pytorch_ddp.py (examples/torchrun_ddp.py),
driven by the library (`import elastic_agent`, as examples/pytorch_inplace.py)
instead of torchrun's env:// contract, under `elastic-agent run --set
compute.protocol=library`.

It logs the lines bench/recovery_pytorch.py reads, with one difference: the
"phase" line is printed once per generation (each call of the @run function),
not once per process, because after a fault the same process goes on in a new
generation.  Its times are all the moment the generation's group was formed
(there is no exec, import or checkpoint load in a re-formation); the harness
therefore times "first step at the new world size in a generation formed after
the fault", and prints no per-phase breakdown for this system.
"""
import argparse
import os
import time

import torch

import elastic_agent
from elastic_agent.torch import TorchState

GLOBAL_BATCH = 24
FEATURES = 8

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--step-sleep", type=float, default=0.0)
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Linear(FEATURES, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
state = TorchState(model=model, optimizer=opt)


def batch(step, gen):
    """The step's fixed global batch (as recovery_pytorch_ddp.py), this rank's part."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0
    r = gen.shard(GLOBAL_BATCH)
    return x[r.start:r.stop], y[r.start:r.stop]


@elastic_agent.run(state)
def train(gen):
    def log(msg):
        print(f"train rank={gen.rank} world={gen.world} {msg} t={time.time():.3f}", flush=True)

    net = gen.ddp()  # gradients summed: the global mean below
    t = time.time()
    log(f"phase pid={os.getpid()} exec={t:.3f} script={t:.3f} torch={t:.3f} imported={t:.3f} "
        f"pg={t:.3f} ckpt={t:.3f} ddp={t:.3f}")
    log(f"start step={state.step} gen={gen.gen} sync={gen.sync}")
    while state.step < a.steps:
        x, y = batch(state.step, gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y, reduction="sum") / GLOBAL_BATCH
        loss.backward()
        opt.step()
        if a.step_sleep:
            time.sleep(a.step_sleep)
        log(f"step={state.step + 1} loss={float(loss):.6f}")  # done and applied (as the torchrun script's)
        gen.report(loss=float(loss))
    return state.step


train()
