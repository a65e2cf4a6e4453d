"""bench/recovery_pytorch.sh's and bench/goodput.sh's NVRx peer: the model,
data, optimizer and step sleep of bench/recovery_pytorch_ddp.py
(examples/torchrun_ddp.py: nn.Linear(8, 1), SGD lr 0.05, a fixed global batch
of 24 per step, --step-sleep after each step, a checkpoint every --save-every
steps) driven by NVIDIA Resiliency Extension (nvidia-resiliency-ext 0.4.1) as
its in-job + in-process example does
(examples/fault_tolerance/in_job_and_in_process_example.py, v0.4.1):

* started by `ft_launcher` (NVRx's in-job restart, a copy of torchrun's
  elastic agent with rank monitors) with --ft-restart-policy=min-healthy,
  the policy its docs require with in-process restart;
* the training function wrapped in `inprocess.Wrapper` (in-process restart:
  on a fault every healthy rank aborts its process group and calls the
  function again, in the same process, without the ranks that died or stopped
  answering; ranks shifted down, RANK/WORLD_SIZE updated), with the example's
  store port (MASTER_PORT + 2) and CudaHealthCheck (a no-op without CUDA);
* model and optimizer built once, outside the wrapper; a TCPStore at
  MASTER_PORT + 1 built once, each restart iteration's process group on a
  PrefixStore(iteration) of it; each iteration loads the latest checkpoint
  (rank 0 saves it, inside call_wrapper.atomic(), as the example does), so
  the steps since it are computed again;
* a RankMonitorClient (the in-job side's heartbeats): connected again at the
  start of every iteration, a heartbeat after every step.

One change from the example, for torch 2.x: `import torch._dynamo` before the
wrapper runs.  The first optimizer step imports it lazily; a fault during that
import (the wrapper interrupts the main thread) leaves the module half
imported and every restart after it fails with AttributeError (seen here).

It prints the lines bench/recovery_pytorch.py reads ("train rank=R world=W …
t=<time.time()>"), like bench/recovery_torchft.py: "phase" once per restart
iteration of the wrapper (the harness times the first step at the new world
size in an iteration begun after the fault), "start step=N" (the checkpoint's
step), "step=N loss=L" per step.

--no-inprocess: NVRx's in-job restart alone (bench's nvrx-injob, under
ft_launcher's default any-failed policy): the wrapper disabled, a fault ends
the worker and ft_launcher restarts every worker, as torchrun does.

--tuned: shorter in-process timeouts (soft 5 s, hard 8 s, heartbeat 3 s,
barrier and completion 30 s) instead of the wrapper's defaults (60, 90, 30,
120, 120 s), and a gloo timeout of 3 s instead of the example's 10 s: the
wrapper's abort (AbortTorchDistributed) aborts only NCCL; a rank blocked in a
gloo collective whose peer is gone (not its ring neighbour: no reset seen)
returns only at the gloo timeout, and the hard timeout terminates it if that
comes later (seen here with 10 s against a hard timeout of 8 s: the rank was
SIGTERMed, its ft_launcher counted a failed group, and min-healthy restarted
every worker).
"""
import time
T_SCRIPT = time.time()
import argparse
import contextlib
import datetime
import logging
import os
import sys

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "error")  # as NVRx's example
import torch
T_TORCH = time.time()
import torch.distributed as dist
import torch._dynamo  # noqa: F401  before the wrapper (see above)

import nvidia_resiliency_ext.fault_tolerance as fault_tolerance
import nvidia_resiliency_ext.inprocess as inprocess

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the same model sizes and data as the torchrun script (its main() does not run)
from recovery_pytorch_ddp import FEATURES, GLOBAL_BATCH, _exec_time, batch  # noqa: E402
T_EXEC = _exec_time()
T_IMPORTED = time.time()

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--save-every", type=int, default=5)
p.add_argument("--ckpt", default="ckpt")
p.add_argument("--step-sleep", type=float, default=0.0)
p.add_argument("--gloo-timeout", type=float, default=None)
p.add_argument("--tuned", action="store_true")
p.add_argument("--no-inprocess", action="store_true",
               help="in-job restart only: the wrapper disabled (Wrapper(enabled=False) calls the function as is)")
a = p.parse_args()
if a.gloo_timeout is None:
    a.gloo_timeout = 3.0 if a.tuned else 10.0  # 10 s: the example's on CPU

logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                    level=logging.INFO if os.environ.get("EA_NVRX_INFO") else logging.WARNING)
torch.set_num_threads(1)


def log(msg):
    print(f"train rank={os.environ.get('RANK', '?')} world={os.environ.get('WORLD_SIZE', '?')} {msg} "
          f"t={time.time():.3f}", flush=True)


if a.tuned:
    timeouts = dict(soft_timeout=datetime.timedelta(seconds=5), hard_timeout=datetime.timedelta(seconds=8),
                    heartbeat_timeout=datetime.timedelta(seconds=3),
                    barrier_timeout=datetime.timedelta(seconds=30),
                    completion_timeout=datetime.timedelta(seconds=30))
else:
    timeouts = {}


@inprocess.Wrapper(
    store_kwargs={"port": int(os.getenv("MASTER_PORT", 29500)) + 2},
    health_check=inprocess.health_check.CudaHealthCheck(),
    enabled=not a.no_inprocess,
    **timeouts,
)
def train(ft_client, base_store, model, opt, call_wrapper: inprocess.CallWrapper = None):
    t_begin = time.time()
    iteration = call_wrapper.iteration if call_wrapper else 0  # None: --no-inprocess
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # the example: reconnect so the rank monitors see the new rank-to-node mapping
    if ft_client.is_initialized:
        ft_client.shutdown_workload_monitoring()
    ft_client.init_workload_monitoring()
    store = dist.PrefixStore(str(iteration), base_store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=a.gloo_timeout))
    t_pg = time.time()
    path = os.path.join(a.ckpt, "ckpt.pt")
    step = 0
    if os.path.exists(path):
        st = torch.load(path, weights_only=True)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
    t_ckpt = time.time()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    log(f"phase pid={os.getpid()} exec={T_EXEC:.3f} script={T_SCRIPT:.3f} torch={T_TORCH:.3f} "
        f"imported={T_IMPORTED:.3f} pg={t_pg:.3f} ckpt={t_ckpt:.3f} ddp={time.time():.3f} "
        f"iteration={iteration} begin={t_begin:.3f}")
    log(f"start step={step} iteration={iteration}")
    while step < a.steps:
        x, y = batch(step, rank, world)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y, reduction="sum") * world / GLOBAL_BATCH
        loss.backward()
        opt.step()
        step += 1
        log(f"step={step} loss={loss.item() / world:.6f}")
        if rank == 0 and step % a.save_every == 0:
            with call_wrapper.atomic() if call_wrapper else contextlib.nullcontext():  # no restart mid-write
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
        ft_client.send_heartbeat()
        if a.step_sleep:
            time.sleep(a.step_sleep)
    dist.barrier()
    log(f"done step={step}")


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs(a.ckpt, exist_ok=True)
    # the example's store, built once: MASTER_PORT + 1, hosted by the first rank 0
    base_store = dist.TCPStore(host_name=os.environ["MASTER_ADDR"], port=int(os.environ["MASTER_PORT"]) + 1,
                               world_size=int(os.environ["WORLD_SIZE"]), is_master=int(os.environ["RANK"]) == 0,
                               multi_tenant=True, wait_for_workers=True, use_libuv=True)
    ft_client = fault_tolerance.RankMonitorClient()
    try:
        train(ft_client, base_store, model, opt)
    finally:
        if ft_client.is_initialized:
            ft_client.shutdown_workload_monitoring()


if __name__ == "__main__":
    main()
    sys.exit(0)
