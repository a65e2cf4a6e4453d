"""The TorchState the determinism tests build, in this process and in another."""
import random

import torch


def build(seed, train_steps=3):
    """A small model with BatchNorm, Adam (with state), a scheduler and extras, trained a few steps."""
    torch.manual_seed(seed)
    random.seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.ReLU(),
                                torch.nn.Linear(5, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    emb = torch.nn.Embedding(4, 3)
    from elastic_agent.torch import TorchState  # after torch.manual_seed: nothing random in it
    st = TorchState(model=model, optimizer=opt, sched=sched, emb=emb, mask=torch.ones(3, dtype=torch.bool),
                    epoch=1, cfg={"lr": 0.01, "sizes": (6, 5, 2), "name": "tiny", 7: [1, None]})
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(train_steps):
        x = torch.randn(8, 6, generator=g)
        loss = model(x).pow(2).mean() + emb.weight.sum() * 0
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        st.step += 1
    return st
