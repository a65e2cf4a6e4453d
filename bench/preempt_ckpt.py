"""bench/preempt_ckpt.sh's program: a model of --mib MiB of float32
parameters (two square bias-free Linear layers, SGD with momentum, so the
state the agents checkpoint is about twice that), trained under DDP (gloo)
through the library, one line per step:

  train rank=R world=W step=S t=EPOCH
"""
import argparse
import time

import torch

import elastic_agent
from elastic_agent.torch import TorchState

p = argparse.ArgumentParser()
p.add_argument("--mib", type=int, default=128)
a = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
n = int(((a.mib << 20) / 8) ** 0.5)  # two n×n float32 layers: 2·n²·4 bytes
model = torch.nn.Sequential(torch.nn.Linear(n, n, bias=False), torch.nn.Linear(n, n, bias=False))
opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
state = TorchState(model=model, optimizer=opt)
# one local step so that the optimizer holds its momentum buffers from the
# start: the state has its full size in every checkpoint
model(torch.randn(2, n)).pow(2).mean().backward()
opt.step()
opt.zero_grad()


@elastic_agent.run(state)
def train(gen):
    net = gen.ddp()
    while True:
        g = torch.Generator().manual_seed(state.step)
        loss = net(torch.randn(2, n, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"train rank={gen.rank} world={gen.world} step={state.step + 1} t={time.time():.3f}",
              flush=True)
        gen.report(loss=float(loss))


train()
