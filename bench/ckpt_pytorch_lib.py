"""bench/ckpt_pytorch.sh's program: a model of about --mib MiB of float32
parameters (two square Linear layers, SGD with momentum, so the state is
about twice that), driven by the library; the agents checkpoint it every
checkpoint.save_interval_steps.  Each step logs a line; at the end, rank 0
times torch.save of the same state (model and optimizer state_dict) into
--save-dir, with an fsync, --saves times (the bench gives 0 to all but one
node) before it joins (after the job the agent stops the process within its
stop grace), one line per save:

  TORCHSAVE bytes=N seconds=S

That is the synchronous baseline the agents' staging stall (logged by the
agent: `ckpt shard_written ... stall_ms=`) is compared with.
"""
import argparse
import os
import time

import torch

import elastic_agent
from elastic_agent.torch import TorchState

p = argparse.ArgumentParser()
p.add_argument("--mib", type=int, default=128)
p.add_argument("--steps", type=int, default=12)
p.add_argument("--saves", type=int, default=3)
p.add_argument("--save-dir", default=".")
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
# two n×n layers of float32: 2·n²·4 bytes ≈ mib MiB
n = int(((a.mib << 20) / 8) ** 0.5)
model = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False), torch.nn.Linear(n, n, bias=False))
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
state = TorchState(model=model, optimizer=opt)


# one local step so that the optimizer holds its momentum buffers (the state
# the agents checkpoint is parameters + momentum), then undo nothing: the
# baseline only needs the same bytes
x = torch.randn(2, n)
model(x).pow(2).mean().backward()
opt.step()
opt.zero_grad()

if a.saves:
    path = os.path.join(a.save_dir, "torch-save-%d.pt" % os.getpid())
    for _ in range(a.saves):
        t0 = time.monotonic()
        with open(path, "wb") as f:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        secs = time.monotonic() - t0
        print(f"TORCHSAVE bytes={os.path.getsize(path)} seconds={secs:.4f}", flush=True)
        os.unlink(path)


@elastic_agent.run(state)
def train(gen):
    net = gen.ddp()
    while state.step < a.steps:
        g = torch.Generator().manual_seed(state.step)
        x = torch.randn(2, n, generator=g)
        loss = net(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"train rank={gen.rank} world={gen.world} step={state.step + 1} t={time.time():.3f}",
              flush=True)
        gen.report(loss=float(loss))
    return gen.rank


train()
