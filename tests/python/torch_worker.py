"""The program the in-place tests run as a worker: a tiny regression model
under DDP (gloo), driven by elastic_agent, as a user would write it.

Environment: EA_TEST_MODE ddp|flat (DDP with the sum hook, or one flat
gradient allreduce), EA_TEST_PACE seconds of sleep per step (a rate limit, so
that the fake agent reads a few hundred reports rather than thousands),
EA_TEST_STEPS (default: until stopped), EA_TEST_STEPS_FILE (a file whose
number, once written, replaces EA_TEST_STEPS; read before every step, so a
test ends a running job by writing a step well ahead of every rank),
EA_TEST_DEVICE cpu (default) or cuda (the model and data on this local
rank's GPU: scripts/gpu-check.sh runs it so under NCCL).
"""
import os
import time

import torch

import elastic_agent
from elastic_agent.torch import TorchState

torch.set_num_threads(1)
B = 12
PACE = float(os.environ.get("EA_TEST_PACE", "0.003"))
STEPS = int(os.environ.get("EA_TEST_STEPS", "1000000000"))
MODE = os.environ.get("EA_TEST_MODE", "ddp")
STEPS_FILE = os.environ.get("EA_TEST_STEPS_FILE")
DEV = torch.device(os.environ.get("EA_TEST_DEVICE", "cpu"))
if DEV.type == "cuda":
    DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())


def steps():
    if STEPS_FILE:
        try:
            with open(STEPS_FILE) as f:
                return int(f.read())
        except (OSError, ValueError):
            pass
    return STEPS

torch.manual_seed(int(os.environ.get("EA_TEST_INIT_SEED", "1234")))
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(DEV)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
state = TorchState(model=model, optimizer=opt, samples_seen=0)

g = torch.Generator().manual_seed(7)
X = torch.randn(240, 8, generator=g)
Y = X @ torch.randn(8, 1, generator=g)
X, Y = X.to(DEV), Y.to(DEV)


@elastic_agent.run(state)
def train(gen):
    net = gen.ddp() if MODE == "ddp" else model
    while state.step < steps():
        t0 = time.monotonic()
        idx = (torch.tensor(list(gen.samples(B))) % len(X)).to(DEV)
        opt.zero_grad()
        loss = ((net(X[idx]) - Y[idx]) ** 2).sum() / B   # this rank's part of the global mean
        loss.backward()                                    # DDP: gradients summed over the ranks
        if MODE == "flat":
            loss = gen.allreduce_gradients(loss=loss)
        opt.step()
        state.samples_seen += B
        if PACE:
            time.sleep(PACE)
        gen.report(loss=float(loss), compute_time=time.monotonic() - t0)
    return state.step


train()
