#!/usr/bin/env python3
"""A PyTorch Lightning DDP script as Lightning's docs show it: nothing in it knows elastic-agent.

Run it under torchrun (one process per node here; more with --nproc_per_node):

    torchrun --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 \
        examples/frameworks/lightning_ddp.py --ckpt /shared/ckpt

or under elastic-agent in restart mode, unchanged:

    elastic-agent run --join HOST:7000 -- python3 examples/frameworks/lightning_ddp.py --ckpt /shared/ckpt

A LightningModule (a small MLP regression on a seeded random data set),
`Trainer(accelerator="cpu", strategy="ddp", devices=…, num_nodes=…)`, a
ModelCheckpoint every --save-every steps with `save_last=True`, and
`trainer.fit(model, ckpt_path="last")`: the documented way to resume from the
newest checkpoint (none yet: Lightning warns and starts from scratch).

The world size.  Lightning sees TORCHELASTIC_RUN_ID and uses its
TorchElasticEnvironment: ranks, world size and MASTER_ADDR/PORT come from the
environment, and it *insists* that `devices * num_nodes == WORLD_SIZE`
(TorchElasticEnvironment.validate_settings raises "You set `devices=1` and
`num_nodes=3` in Lightning, but the product (1 * 3) does not match the world
size (2)." otherwise).  A script with a fixed `num_nodes=3` therefore cannot
run at world 2 — under an elastic torchrun (`--nnodes=2:3`) no more than under
elastic-agent.  So, as an elastic torchrun user does, take both from the
environment torchrun sets: devices = LOCAL_WORLD_SIZE (processes on this node),
num_nodes = WORLD_SIZE // LOCAL_WORLD_SIZE.  Under `torchrun --nnodes=1
--nproc_per_node=3` that is devices=3, num_nodes=1; under three agents with
one worker each, devices=1, num_nodes=3, and 2 after a node is lost.

Prints, on every rank: `lightning rank=R world=W start step=S resumed=yes|no
ckpt=PATH` once fitting starts (after the restore), then `lightning rank=R
world=W step=S loss=L` per optimizer step.  Test knobs: --step-sleep S (seconds
per step), --finish-file PATH (rank 0 sees it, every rank stops at that step).
"""
import argparse
import os
import sys
import time

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

FEATURES = 8


def dataset(n=960):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, FEATURES, generator=g)
    y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0 + 0.01 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


class Regression(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class StepLog(Callback):
    """One line per step on every rank; stops every rank once rank 0 sees the finish file."""

    def __init__(self, step_sleep, finish_file):
        self.step_sleep, self.finish_file = step_sleep, finish_file

    def _say(self, trainer, msg):
        print(f"lightning rank={trainer.global_rank} world={trainer.world_size} {msg}", flush=True)

    def on_train_start(self, trainer, pl_module):
        ckpt = trainer.ckpt_path  # set by fit(ckpt_path="last") when one was found
        self._say(trainer, f"start step={trainer.global_step} resumed={'yes' if ckpt else 'no'} ckpt={ckpt}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._say(trainer, f"step={trainer.global_step} loss={outputs['loss'].item():.6f}")
        stop = bool(self.finish_file) and trainer.is_global_zero and os.path.exists(self.finish_file)
        if trainer.strategy.broadcast(stop, src=0):  # every rank stops at the same step
            trainer.should_stop = True
        elif self.step_sleep:
            time.sleep(self.step_sleep)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--ckpt", default="ckpt-lightning")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--finish-file", default="")
    a = p.parse_args()

    # What torchrun set (see above): processes on this node, and nodes in the world.
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    num_nodes = int(os.environ.get("WORLD_SIZE", "1")) // devices

    L.seed_everything(0, workers=True)
    checkpoint = ModelCheckpoint(dirpath=a.ckpt, every_n_train_steps=a.save_every, save_top_k=0, save_last=True)
    trainer = L.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=devices,
        num_nodes=num_nodes,
        max_steps=a.steps,
        max_epochs=-1,
        callbacks=[checkpoint, StepLog(a.step_sleep, a.finish_file)],
        default_root_dir=a.ckpt,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = DataLoader(dataset(), batch_size=a.batch_size, shuffle=True)
    trainer.fit(Regression(), train_dataloaders=loader, ckpt_path="last")
    print(f"lightning rank={trainer.global_rank} world={trainer.world_size} done step={trainer.global_step}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
