"""TorchState: a deterministic flat layout, bit-exact restore, and errors
that name the tensor.  Needs torch (the project's virtualenv: the pinned release)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import PYDIR, SEED  # noqa: E402
from elastic_agent.errors import StateError  # noqa: E402
from elastic_agent.torch import TorchState  # noqa: E402
from elastic_agent.xxh3 import xxh3_64  # noqa: E402

from torch_build import build  # noqa: E402


def test_two_independently_built_states_lay_out_identically():
    a, b = build(SEED), build(SEED)
    fa, fb = bytes(a.flat().to_bytes()), bytes(b.flat().to_bytes())
    assert fa == fb
    # …and in another process, under another hash seed (dict order, set order)
    child = ("from torch_build import build\nfrom elastic_agent.xxh3 import xxh3_64\n"
             "print(xxh3_64(bytes(build(%d).flat().to_bytes())))\n" % SEED)
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=PYDIR + ":" + here,
                                  PYTHONHASHSEED=str(SEED % 1000 + 1)))
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == xxh3_64(fa)


def test_the_layout_size_does_not_depend_on_pythons_random_state():
    # Two ranks that never seeded `random` hold different Mersenne Twister
    # words; their states must still lay out to the same size, or the
    # checkpoint shards computed from each rank's total do not tile.  A word
    # below 2^16 packed shorter as msgpack (test_inplace once saw offsets
    # 3509 against 3508).
    st = build(SEED)
    version, words, gauss = random.getstate()
    small = (version, (5,) * 624 + (words[-1],), gauss)
    random.setstate(small)
    a = st.flat().total
    random.setstate((version, (0xFFFFFFFF,) * 624 + (words[-1],), 0.5))
    b = st.flat().total
    assert a == b
    names = [s.name for s in st.flat().specs]
    assert "rng.python" in names
    # and it still restores: the same numbers follow
    random.setstate(small)
    flat = st.flatten()
    x = random.random()
    random.seed(1)
    st.load(flat)
    assert random.random() == x


def test_the_layout_names_every_tensor():
    st = build(SEED)
    names = [s.name for s in st.flat().specs]
    assert names[:8] == ["model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
                         "model.1.running_mean", "model.1.running_var", "model.1.num_batches_tracked",
                         "model.3.weight"]
    for n in ("optimizer.state.0.exp_avg", "optimizer.state.0.exp_avg_sq", "optimizer.state.0.step",
              "extras.emb.weight", "extras.mask", "rng.torch", "rng.python"):
        assert n in names
    assert names[-1] == "meta"


def test_restore_of_flatten_is_bit_exact():
    src = build(SEED)
    flat = src.flatten()
    assert [(t.name, t.dtype, t.shape) for t in src.layout()][0] == ("model.0.weight", "f32", (5, 6))
    dst = build(SEED + 99, train_steps=0)  # other values, no optimizer state yet
    assert bytes(dst.flat().to_bytes()) != bytes(flat)
    dst.load(flat)
    assert bytes(dst.flat().to_bytes()) == bytes(flat)
    assert dst.step == src.step == 3 and dst.epoch == 1 and dst.cfg == src.cfg
    for (k, a), b in zip(src.model.state_dict().items(), dst.model.state_dict().values()):
        assert torch.equal(a, b), k
    assert dst.sched.get_last_lr() == src.sched.get_last_lr()
    assert dst.params_digest() == src.params_digest() and dst.sync_digest() == src.sync_digest()
    # the RNGs continue identically, and so does training
    src.load(flat)
    r1, p1 = torch.rand(3), random.random()
    dst.load(flat)
    r2, p2 = torch.rand(3), random.random()
    assert torch.equal(r1, r2) and p1 == p2
    for s in (src, dst):
        s.load(flat)
        x = torch.ones(4, 6)
        s.optimizer.zero_grad()
        s.model(x).sum().backward()
        s.optimizer.step()
    assert src.params_digest() == dst.params_digest()


def test_digests():
    st = build(SEED)
    raw = b"".join(bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())
                   for t in st.model.state_dict().values())
    assert st.params_digest() == xxh3_64(raw)
    d = st.sync_digest()
    torch.rand(10)  # only the RNG moved
    random.random()
    assert st.sync_digest() == d
    with torch.no_grad():
        st.model[0].bias[0] += 1
    assert st.sync_digest() != d


def test_a_mismatching_model_is_named():
    flat = build(SEED).flat().to_bytes()
    torch.manual_seed(0)
    other = TorchState(model=torch.nn.Sequential(torch.nn.Linear(6, 4)))
    with pytest.raises(StateError) as ei:
        other.load(flat, "checkpoint step-3.gen-1")
    assert str(ei.value) == "checkpoint step-3.gen-1: model.0.weight: f32 5x6, but f32 4x6 in this program"
    wider = TorchState(model=torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5),
                                                 torch.nn.ReLU(), torch.nn.Linear(5, 2), torch.nn.Linear(2, 2)))
    with pytest.raises(StateError, match=r"^state: model.4.weight: missing \(this program's model has it\)$"):
        wider.load(flat)
    before = bytes(other.flat().to_bytes())
    assert bytes(other.flat().to_bytes()) == before  # nothing changed by the failed loads


def test_commit_restore_and_the_applied_step():
    st = build(SEED)
    st.commit()
    snap = bytes(st.flat().to_bytes())
    x = torch.ones(2, 6)
    st.optimizer.zero_grad()
    st.model(x).sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the wrapped step keeps the scheduler's counter
        st.optimizer.step()
        st.sched.step()
    assert st._applied and st._settle() and st.step == 4 and not st._applied
    st.restore()
    assert bytes(st.flat().to_bytes()) == snap and st.step == 3


def test_what_cannot_be_laid_out_fails_at_construction():
    with pytest.raises(StateError, match=r"extras.bad.value: cannot serialise a set"):
        TorchState(model=torch.nn.Linear(2, 2), bad={1, 2})
    with pytest.raises(StateError, match="'step' is the library's"):
        TorchState(step=3)
    with pytest.raises(StateError, match="contains a space"):
        TorchState(**{"a b": 1})


def run_child(code: str) -> subprocess.CompletedProcess:
    """Runs code in a fresh Python outside any agent (no EA_IPC_FD) and
    asserts that it exited 0: torch state (a process group, store threads)
    and a death in std::terminate stay out of the test run."""
    env = dict(os.environ, PYTHONPATH=PYDIR)
    env.pop("EA_IPC_FD", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def test_ddp_skips_its_own_broadcast_for_the_synced_model():
    """gen.ddp() of the state's model runs neither DDP's shape check nor its
    parameter broadcast (the state sync compared and equalised the models
    already: DDP's init_sync=False); another module gets both."""
    child = (
        "import torch, torch.nn.parallel.distributed as d\n"
        "import elastic_agent\n"
        "from elastic_agent.torch import TorchState\n"
        "calls, checks = [], []\n"
        "orig, orig_check = d._sync_module_states, d._verify_param_shape_across_processes\n"
        "def spy(**kw):\n"
        "    calls.append(kw['module'])\n"
        "    orig(**kw)\n"
        "def check(*a, **kw):\n"
        "    checks.append(len(a[1]))\n"
        "    return orig_check(*a, **kw)\n"
        "d._sync_module_states, d._verify_param_shape_across_processes = spy, check\n"
        "model, other = torch.nn.Linear(3, 1), torch.nn.Linear(2, 1)\n"
        "state = TorchState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))\n"
        "@elastic_agent.run(state)\n"
        "def train(gen):\n"
        "    gen.ddp(); gen.ddp(other)\n"
        "    assert d._sync_module_states is spy and d._verify_param_shape_across_processes is check\n"
        "    return [m is other for m in calls], checks\n"
        "print(train())\n")
    out = run_child(child)
    assert out.stdout.strip().splitlines()[-1] == "([True], [2])"  # other's weight and bias


def test_the_state_needs_no_numpy():
    """torch does not depend on numpy (2.7's wheel does not pull it in): a
    state with the Python RNG lays out, restores and checkpoints without it
    (1.13-era code read the RNG blob back through Tensor.numpy())."""
    child = (
        "import sys\n"
        "sys.modules['numpy'] = None  # import numpy fails, as where it is not installed\n"
        "import random, torch\n"
        "from elastic_agent.torch import TorchState\n"
        "m = torch.nn.Linear(3, 2)\n"
        "s = TorchState(model=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1), epoch=1)\n"
        "random.seed(5); flat = s.flatten(); want = [random.random() for _ in range(3)]\n"
        "random.seed(9); s.load(flat)\n"
        "assert [random.random() for _ in range(3)] == want\n"
        "print('ok')\n")
    out = run_child(child)
    assert out.stdout.split()[-1] == "ok", out.stdout + out.stderr


def test_an_abort_while_forming_ends_the_wait_for_a_missing_peer():
    """A rank forming a world-2 group whose peer never comes waits in the
    store; abort() (what the library does on PREPARE or a reset) ends that
    wait at once with a CommError, long before the group's timeout, and the
    process tears down and exits cleanly (torch's store threads must not
    die in std::terminate on the shut sockets, as 1.13's once did).  In a child process, so
    that such a death fails this test instead of the run."""
    child = (
        "import threading, time\n"
        "from elastic_agent import CommError\n"
        "from elastic_agent.torch import TorchBackend\n"
        "b = TorchBackend('gloo')\n"
        "addr = b.start('127.0.0.1:0', 0)\n"
        "threading.Timer(0.2, b.abort).start()\n"
        "t0 = time.monotonic()\n"
        "try:\n"
        "    b.form({'gen': 1, 'store': addr, 'rank': 0, 'world': 2, 'timeout_ms': 20000})\n"
        "    print('formed')\n"
        "except CommError as e:\n"
        "    print('aborted %.3f' % (time.monotonic() - t0))\n"
        "b.teardown()\n"
        "b.close()\n"
        "print('clean')\n")
    out = run_child(child)
    lines = out.stdout.split()
    assert lines[0] == "aborted" and lines[-1] == "clean", out.stdout + out.stderr
    assert float(lines[1]) < 10.0, "the wait was not ended by the abort: %s s" % lines[1]


def test_the_default_backend_is_torchs_own(monkeypatch):
    """No backend asked for: gloo on a CPU-only machine; where CUDA is,
    torch's own default of init_process_group — gloo for CPU tensors and
    NCCL for CUDA tensors in one group — so that a program with its model on
    the CPU works on a GPU node too (a group with NCCL alone has no backend
    for CPU tensors: 3 CPU programs of this suite failed on torch 2.11.0 on
    an H100, most likely so).
    An explicit backend is kept."""
    import torch
    from elastic_agent.torch import BOTH, TorchBackend
    assert BOTH == "cpu:gloo,cuda:nccl"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert TorchBackend().name == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert TorchBackend().name == BOTH
    assert TorchBackend("gloo").name == "gloo" and TorchBackend("nccl").name == "nccl"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: NCCL forms (scripts/gpu-check.sh)")
def test_the_nccl_path_without_a_gpu():
    """What of the NCCL path runs on a CPU-only machine (NCCL runs only in
    scripts/gpu-check.sh, on a GPU): forming a group with backend nccl sets torch 2.x's
    TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (not 1.13's name) and fails with a
    CommError naming the missing device, not a crash; a user's own setting is
    kept."""
    child = (
        "import os\n"
        "from elastic_agent import CommError\n"
        "from elastic_agent.torch import TorchBackend\n"
        "for preset in (None, '3'):\n"
        "    os.environ.pop('TORCH_NCCL_ASYNC_ERROR_HANDLING', None)\n"
        "    if preset: os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'] = preset\n"
        "    b = TorchBackend('nccl')\n"
        "    addr = b.start('127.0.0.1:0', 0)\n"
        "    try:\n"
        "        b.form({'gen': 1, 'store': addr, 'rank': 0, 'world': 1, 'timeout_ms': 5000})\n"
        "        print('formed')\n"
        "    except CommError as e:\n"
        "        print('commerror', e.errno, 'cuda' in str(e).lower(), os.environ['TORCH_NCCL_ASYNC_ERROR_HANDLING'],\n"
        "              'NCCL_ASYNC_ERROR_HANDLING' in os.environ)\n"
        "    b.close()\n")
    out = run_child(child)
    lines = out.stdout.strip().splitlines()
    assert lines == ["commerror 5 True 1 False", "commerror 5 True 3 False"], out.stdout + out.stderr


def test_an_nccl_abort_goes_through_torchs_own(monkeypatch, caplog):
    """The abort of an NCCL generation calls torch's ProcessGroup.abort()
    (ncclCommAbort) once, from whatever thread the library's reader runs it
    on; a torch without it is logged, not a crash; with no group formed
    (a PREPARE before the first COMMIT, a STOP after the teardown) there is
    nothing to abort and nothing is logged — on the GPU (torch 2.11.0) every
    worker logged "this torch cannot abort an NCCL group" there.  (A fake
    group: no GPU.)"""
    import logging
    import torch.distributed as dist
    from elastic_agent.torch import TorchBackend

    b0 = TorchBackend("gloo")
    b0.name = "nccl"
    assert not dist.is_initialized()
    with caplog.at_level(logging.DEBUG):
        b0.abort()
    assert not [r for r in caplog.records if "abort" in r.getMessage()], caplog.text

    class Group:
        calls = 0

        def abort(self):
            Group.calls += 1

    assert not dist.is_initialized()
    b = TorchBackend("gloo")
    b.name = "nccl"  # as after a formed NCCL generation
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    try:
        dist.group.WORLD = Group()  # a property with a setter, no deleter
        b.abort()
        assert Group.calls == 1
        dist.group.WORLD = object()  # no abort(): the timeout is the fallback
        b.abort()
        assert Group.calls == 1
    finally:
        dist.group.WORLD = None
