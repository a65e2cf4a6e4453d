#!/usr/bin/env python3
"""A Hugging Face Accelerate script as Accelerate's docs and examples show it: nothing in it knows elastic-agent.

Run it under torchrun (or `accelerate launch`, which runs torchrun's launcher):

    torchrun --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 \
        examples/frameworks/accelerate_ddp.py --ckpt /shared/ckpt

or under elastic-agent in restart mode, unchanged:

    elastic-agent run --join HOST:7000 -- python3 examples/frameworks/accelerate_ddp.py --ckpt /shared/ckpt

`Accelerator(cpu=True)` reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
MASTER_ADDR/MASTER_PORT from the environment (MULTI_CPU, gloo) — no world size
in the script, so it runs at whatever size it is started with.  Model,
optimizer and DataLoader go through `accelerator.prepare` (DDP, and the loader
sharded over the processes); `accelerator.backward`.

Checkpoints: `accelerator.save_state(DIR)` every --save-every steps into
CKPT/step_N, the step in the folder's name, and at start `accelerator.load_state`
of the newest one, then `accelerator.skip_first_batches` into the epoch —
Accelerate's own examples (complete_nlp_example.py, --checkpointing_steps /
--resume_from_checkpoint) do exactly this.  save_state is called on every
process (each one writes its own random_states_R.pkl); the one addition here
is that it saves into step_N.tmp and the main process renames it to step_N
after `wait_for_everyone()`, so a process killed in the middle of a save (a
node lost: its peers' workers are stopped too) never leaves a half-written
newest checkpoint for the next start to load.  The main process keeps the
newest two.

Prints, on every process: `accelerate rank=R world=W start step=S
resumed=yes|no ckpt=PATH`, then `accelerate rank=R world=W step=S loss=L` per
optimizer step.  Test knobs: --step-sleep S (seconds per step), --finish-file
PATH (the main process sees it, every process stops at that step).
"""
import argparse
import os
import re
import shutil
import sys
import time

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 8


def dataset(n=960):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0 + 0.01 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def checkpoints(root):
    """Complete checkpoints under root, oldest first, as (step, path)."""
    if not os.path.isdir(root):
        return []
    found = [(int(m.group(1)), os.path.join(root, d)) for d in os.listdir(root)
             if (m := re.fullmatch(r"step_(\d+)", d))]
    return sorted(found)


def save(accelerator, root, step, keep=2):
    final = os.path.join(root, f"step_{step}")
    tmp = final + ".tmp"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a process killed while saving
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp)  # every process: each writes its own RNG state
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for _, old in checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--ckpt", default="ckpt-accelerate")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--finish-file", default="")
    a = p.parse_args()

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes

    def say(msg):
        print(f"accelerate rank={rank} world={world} {msg}", flush=True)

    set_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(dataset(), batch_size=a.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step, resumed_from = 0, None
    found = checkpoints(a.ckpt)
    if found:
        step, resumed_from = found[-1]
        accelerator.load_state(resumed_from)
    say(f"start step={step} resumed={'yes' if resumed_from else 'no'} ckpt={resumed_from}")

    per_epoch = len(loader)  # batches per process per epoch at this world size
    epoch, skip = divmod(step, per_epoch)
    stop = False
    while not stop and step < a.steps:
        loader.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, skip) if skip else loader
        skip = 0
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            say(f"step={step} loss={loss.item():.6f}")
            flag = torch.tensor([1.0 if (a.finish_file and accelerator.is_main_process
                                         and os.path.exists(a.finish_file)) else 0.0])
            stop = accelerator.reduce(flag, reduction="sum").item() > 0  # every process stops together
            if step % a.save_every == 0 or stop or step == a.steps:
                save(accelerator, a.ckpt, step)
            if stop or step >= a.steps:
                break
            if a.step_sleep:
                time.sleep(a.step_sleep)
        epoch += 1
    accelerator.wait_for_everyone()
    say(f"done step={step}")
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
