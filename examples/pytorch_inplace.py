"""A PyTorch program that re-forms in place under elastic-agent (docs/pytorch.md).

Run it under the agents (one line of the job file)::

    compute:
      worker_command: "python3 examples/pytorch_inplace.py"
    checkpoint:
      dir: /shared/ck
      save_interval_steps: 50

or alone, for development, at world 1 (no agent, no checkpoints)::

    PYTHONPATH=python python3 examples/pytorch_inplace.py

Every node runs the same program.  When a node dies, joins or drains, the
survivors stay in this very process: ``train`` returns to the library, which
forms the new process group, broadcasts the state from the rank with the
most steps, and calls ``train`` again — ``state.step`` says where to go on.
"""
import os
import time

import torch
import torch.nn.functional as F

import elastic_agent
from elastic_agent.torch import TorchState

# STEPS when set, else the job file's train.steps (the agent exports it)
STEPS = int(os.environ.get("STEPS") or os.environ.get("EA_TRAIN_STEPS") or "2000")
GLOBAL_BATCH = 64          # fixed, whatever the number of ranks
DATASET = 4096

torch.set_num_threads(1)

# Everything slow happens before the library says hello to the agent: the
# agent takes this node into a generation only after that (imports, data,
# model), so the running ranks never wait for it.
torch.manual_seed(0)       # the same initial model everywhere (the first sync would make it so anyway)
g = torch.Generator().manual_seed(1)
X = torch.randn(DATASET, 32, generator=g)
Y = (X @ torch.randn(32, 1, generator=g)).tanh()

model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)

# The state is what survives a re-formation and goes into checkpoints:
# model, optimizer, extras (the scheduler, plain values), RNG states.
state = TorchState(model=model, optimizer=optimizer, scheduler=scheduler, epoch=0)


def batch(gen):
    """This rank's part of the step's global batch: samples
    [s·B + ⌊rB/W⌋, s·B + ⌊(r+1)B/W⌋) of a per-epoch permutation, so the
    trajectory does not depend on how many ranks happen to be alive."""
    per_epoch = DATASET // GLOBAL_BATCH
    epoch = state.step // per_epoch
    perm = torch.randperm(DATASET, generator=torch.Generator().manual_seed(epoch))
    idx = perm[[i % (per_epoch * GLOBAL_BATCH) for i in gen.samples(GLOBAL_BATCH)]]
    return X[idx], Y[idx], epoch


@elastic_agent.run(state)
def train(gen):
    # Called once per generation, with the process group formed.
    print("generation %d: rank %d of %d, from step %d (%s)" % (gen.gen, gen.rank, gen.world,
                                                               state.step, gen.sync), flush=True)
    ddp = gen.ddp()                     # DDP over this generation's group; gradients summed
    while state.step < STEPS:
        t0 = time.monotonic()
        x, y, state.epoch = batch(gen)
        optimizer.zero_grad()
        # this rank's samples' loss over the global batch: the summed
        # gradients are those of the global mean
        loss = F.mse_loss(ddp(x), y, reduction="sum") / GLOBAL_BATCH
        loss.backward()                 # a peer died? this raises; the library handles it
        optimizer.step()
        scheduler.step()
        gen.report(loss=loss.item(), compute_time=time.monotonic() - t0)
    return state.step


if __name__ == "__main__":
    done = train()                      # returns when the agent says STOP (or, alone, at STEPS)
    print("finished at step", done, flush=True)
