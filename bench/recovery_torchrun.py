#!/usr/bin/env python3
"""Baseline half of bench/recovery: the torchrun side.

Two roles in one file, so the scenario needs nothing beyond torch (the
project's virtualenv):

  worker   (the default; what each torchrun "node" runs)  a small
           data-parallel training loop: an MLP wrapped in DDP on the gloo
           backend, so every step ends in an allreduce of the gradients
           across all nodes.  Every event is appended as one JSON line with
           a wall-clock time.time() stamp to a per-node log: "start" (the
           process began, with the rank/world/restart count torchrun gave
           it), "ready" (the process group is up), "step" (a step finished),
           "error" (a collective failed, with the message).  Nothing here
           knows about the benchmark; it only reports what it saw.

  analyze  (`recovery_torchrun.py analyze DIR`) reads the node logs, the
           timestamped agent logs and the events file that
           bench/recovery_torchrun.sh wrote, turns each fault into the
           three latencies the issue asks for, prints the table and writes
           the JSON.

The measured intervals, all from the instant the harness sent SIGKILL:
  detect    a surviving torchrun agent logs that its worker group FAILED
            (torchrun has no failure detector of its own: it learns about a
            dead node only because its own worker's allreduce failed);
            `worker_err` is the earlier moment that worker saw the error.
  rdzv      a surviving agent logs "Rendezvous complete" with the new world
            size (the new generation is committed).
  step      the first training step completed at the new world size by a
            worker started after the fault.
"""

import argparse
import json
import os
import statistics
import sys
import time


def _log_line(fh, **rec):
    rec["t"] = time.time()
    fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    fh.flush()


def worker(args):
    # One compute thread: the bench shares two cores with four nodes and
    # with other engineers' jobs; more threads only add contention noise.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    fh = open(args.log, "a", buffering=1)
    base = dict(node=args.node, pid=os.getpid(), rank=rank, world=world, restart=restart)
    _log_line(fh, ev="start", **base)

    # The gloo timeout bounds how long a collective waits for a peer that
    # vanished without closing its sockets (a host crash, a partition).  On
    # loopback a SIGKILLed process always closes its sockets, so the
    # survivors fail at once whatever this is; it is passed through so the
    # tuned variant documents the knob an operator would turn.
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.gloo_timeout))
    _log_line(fh, ev="ready", **base)

    torch.manual_seed(1234)  # same initial weights everywhere, as DDP expects
    model = DDP(torch.nn.Sequential(
        torch.nn.Linear(args.dim, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    deadline = time.monotonic() + args.max_seconds
    step = 0
    try:
        while time.monotonic() < deadline:
            x = torch.randn(args.batch, args.dim, generator=gen)
            y = torch.randint(0, 10, (args.batch,), generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()  # DDP allreduces the gradients here (gloo)
            opt.step()
            step += 1
            _log_line(fh, ev="step", step=step, loss=round(loss.item(), 4), **base)
            # Pace the loop: the step period is the resolution of the
            # "first completed step" figure, and an unpaced loop on two
            # shared cores would starve the agents being measured.
            time.sleep(args.step_sleep)
    except Exception as e:  # a peer died: record when we noticed, then fail
        _log_line(fh, ev="error", msg=str(e).splitlines()[0][:200] if str(e) else type(e).__name__, **base)
        fh.close()
        os._exit(1)  # skip gloo teardown, which can block on dead peers
    _log_line(fh, ev="deadline", **base)
    fh.close()
    return 0


# ---------------------------------------------------------------- analysis

def _read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by the node being killed mid-write
    return out


def _agent_events(path, node):
    """Timestamped torchrun agent log lines -> (t, kind, value) tuples.

    The launcher prefixes every line the agent writes with $EPOCHREALTIME as
    it arrives, so these times are the moments the agent said it, give or
    take pipe latency."""
    ev = []
    if not os.path.exists(path):
        return ev
    pending_rdzv = None
    with open(path, errors="replace") as f:
        for line in f:
            ts, _, text = line.rstrip("\n").partition(" ")
            try:
                t = float(ts)
            except ValueError:
                continue
            if "Worker group FAILED" in text or "Worker group UNHEALTHY" in text:
                ev.append((t, "failed", node))
            elif "Rendezvous complete for workers" in text:
                pending_rdzv = t
            elif pending_rdzv is not None and "group_world_size=" in text:
                ev.append((pending_rdzv, "rdzv", int(text.split("group_world_size=")[1].split()[0])))
                pending_rdzv = None
            elif "new nodes from group_rank" in text:
                ev.append((t, "waiting", node))
            elif "RendezvousConnectionError" in text or "RendezvousError" in text or "RendezvousTimeoutError" in text:
                ev.append((t, "rdzv_error", node))
    return ev


def analyze_fault(d, fault, nodes):
    """Latencies for one fault record written by the launcher."""
    t0 = fault["t_kill"]
    expect = fault["expect_world"]
    survivors = [n for n in nodes if n not in fault.get("dead", [])]
    res = {"variant": fault["variant"], "kind": fault["kind"], "trial": fault["trial"],
           "victim": fault["victim"], "expect_world": expect}
    worker_err, detect, rdzv, step, rdzv_err = [], [], [], [], []
    starts_after = 0
    until = fault.get("t_end", float("inf"))
    for n in survivors:
        recs = _read_jsonl(os.path.join(d, f"node{n}.jsonl"))
        new_pids = {r["pid"] for r in recs if r["ev"] == "start" and r["t"] > t0}
        starts_after += len({r["pid"] for r in recs
                             if r["ev"] == "start" and t0 < r["t"] <= until})
        for r in recs:
            if r["t"] <= t0:
                continue
            if r["ev"] == "error":
                worker_err.append(r["t"])
            elif r["ev"] == "step" and r["world"] == expect and r["pid"] in new_pids:
                step.append(r["t"])
        for (t, kind, v) in _agent_events(os.path.join(d, f"agent{n}.log"), n):
            if t <= t0:
                continue
            if kind == "failed":
                detect.append(t)
            elif kind == "rdzv" and v == expect:
                rdzv.append(t)
            elif kind == "rdzv_error":
                rdzv_err.append(t)

    def first(xs):
        xs = [x for x in xs if x <= until]
        return round(min(xs) - t0, 3) if xs else None

    res.update(worker_err_s=first(worker_err), detect_s=first(detect),
               rdzv_s=first(rdzv), step_s=first(step),
               worker_restarts=starts_after, recovered=bool(fault.get("recovered")))
    if not res["recovered"]:
        # When and how the harness gave up: the survivors' first rendezvous
        # error, and the moment it stopped waiting (all agents gone, or the
        # deadline).
        res["rdzv_error_s"] = first(rdzv_err)
        res["gave_up_s"] = round(until - t0, 3)
        res["outcome"] = fault.get("outcome", "not recovered")
    return res


def analyze_join(d, join, nodes):
    """A node joins a running job: how long until it trains, and how many
    workers on the already-running nodes torchrun restarted for it."""
    t0 = join["t_join"]
    until = join.get("t_end", float("inf"))
    restarted, detect, rdzv, step = 0, [], [], []
    for n in join["old_nodes"]:
        recs = _read_jsonl(os.path.join(d, f"node{n}.jsonl"))
        restarted += len({r["pid"] for r in recs if r["ev"] == "start" and t0 < r["t"] <= until})
        for (t, kind, v) in _agent_events(os.path.join(d, f"agent{n}.log"), n):
            if t0 < t <= until:
                if kind == "waiting":
                    detect.append(t)
                elif kind == "rdzv" and v == join["expect_world"]:
                    rdzv.append(t)
    for n in join["old_nodes"] + [join["node"]]:
        for r in _read_jsonl(os.path.join(d, f"node{n}.jsonl")):
            if r["ev"] == "step" and r["world"] == join["expect_world"] and t0 < r["t"] <= until:
                step.append(r["t"])

    def first(xs):
        return round(min(xs) - t0, 3) if xs else None

    return {"variant": join["variant"], "kind": "node-join", "trial": join["trial"],
            "node": join["node"], "old_workers": len(join["old_nodes"]),
            "old_workers_restarted": restarted, "detect_s": first(detect),
            "rdzv_s": first(rdzv), "step_s": first(step),
            "recovered": bool(join.get("recovered"))}


def _pid_alive(pid):
    """True while pid runs; a zombie (exited, not yet reaped by the
    launcher's shell) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_cmd(args):
    """Poll the node logs until every node in --nodes has completed --steps
    steps at world size --world in a worker process started after --after.
    Prints the time.time() at which that held.  Exit 0 when it held, 1 on
    --timeout, 2 when every pid in --alive is gone first (nothing left that
    could still recover)."""
    nodes = [int(n) for n in args.nodes.split(",")]
    alive = [int(p) for p in args.alive.split(",")] if args.alive else []
    offs = {n: 0 for n in nodes}
    new_pids = {n: set() for n in nodes}
    count = {n: 0 for n in nodes}
    deadline = time.monotonic() + args.timeout
    while True:
        for n in nodes:
            path = os.path.join(args.dir, f"node{n}.jsonl")
            try:
                with open(path) as f:
                    f.seek(offs[n])
                    data = f.read()
            except OSError:
                continue
            # Consume whole lines only; a half-written tail is read next time.
            cut = data.rfind("\n") + 1
            offs[n] += len(data[:cut].encode())
            for line in data[:cut].splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r["t"] <= args.after:
                    continue
                if r["ev"] == "start":
                    new_pids[n].add(r["pid"])
                elif r["ev"] == "step" and r["world"] == args.world and r["pid"] in new_pids[n]:
                    count[n] += 1
        if all(count[n] >= args.steps for n in nodes):
            print(f"{time.time():.6f}")
            return 0
        if alive and not any(_pid_alive(p) for p in alive):
            return 2
        if time.monotonic() > deadline:
            return 1
        time.sleep(args.poll)


def _stat(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, 0
    return round(statistics.median(xs), 2), round(max(xs), 2), len(xs)


def analyze(args):
    d = args.dir
    meta = json.load(open(os.path.join(d, "meta.json")))
    faults, joins = [], []
    for e in _read_jsonl(os.path.join(d, "events.jsonl")):
        vdir = os.path.join(d, e.get("dir", e["variant"]))
        if e["type"] == "fault":
            faults.append(analyze_fault(vdir, e, meta["nodes"]))
        elif e["type"] == "join":
            joins.append(analyze_join(vdir, e, meta["nodes"]))

    rows = []
    order = []
    for f in faults:
        key = (f["variant"], f["kind"])
        if key not in order:
            order.append(key)
    for key in order:
        fs = [f for f in faults if (f["variant"], f["kind"]) == key]
        row = {"variant": key[0], "kind": key[1], "trials": len(fs),
               "recovered": sum(1 for f in fs if f["recovered"])}
        for m in ("worker_err_s", "detect_s", "rdzv_s", "step_s"):
            med, mx, n = _stat([f[m] for f in fs])
            row[m] = {"median": med, "max": mx, "n": n}
        row["worker_restarts_median"] = _stat([f["worker_restarts"] for f in fs])[0]
        rows.append(row)
    jrows = []
    for v in [v for i, v in enumerate(j["variant"] for j in joins)
              if v not in [j["variant"] for j in joins][:i]]:
        js = [j for j in joins if j["variant"] == v]
        row = {"variant": v, "kind": "node-join", "trials": len(js),
               "recovered": sum(1 for j in js if j["recovered"]),
               "old_workers_restarted": [j["old_workers_restarted"] for j in js],
               "old_workers": [j["old_workers"] for j in js]}
        for m in ("detect_s", "rdzv_s", "step_s"):
            med, mx, n = _stat([j[m] for j in js])
            row[m] = {"median": med, "max": mx, "n": n}
        jrows.append(row)

    out = {"bench": "recovery", "system": "torchrun", "torch": meta.get("torch"),
           "host": meta.get("host"), "date": meta.get("date"), "cpus": meta.get("cpus"),
           "loadavg_start": meta.get("loadavg"), "settings": meta["settings"],
           "summary": rows, "join_summary": jrows, "faults": faults, "joins": joins}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    print_table(out)
    if args.tsv:
        with open(args.tsv, "w") as f:
            for r in rows + jrows:
                f.write("\t".join(str(x) for x in (
                    r["variant"], r["kind"], r["trials"], r["recovered"],
                    _cell(r["detect_s"]), _cell(r["rdzv_s"]), _cell(r["step_s"]))) + "\n")
    return 0


def _fmt_n(x):
    return "-" if x is None else f"{x:g}"


def _cell(m):
    return "-" if m["median"] is None else f"{m['median']:.2f}/{m['max']:.2f}"


def print_table(out):
    print(f"torchrun recovery (torch {out['torch']}, {out['cpus']} cpus, "
          f"load {out['loadavg_start']}); seconds from SIGKILL, median/max over trials")
    hdr = (f"{'variant':<9} {'event':<14} {'ok':>5} {'worker_err':>12} {'detect(a)':>12} "
           f"{'rdzv(b)':>12} {'step(c)':>12} {'restarted':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in out["summary"]:
        ok = f"{r['recovered']}/{r['trials']}"
        print(f"{r['variant']:<9} {r['kind']:<14} {ok:>5} {_cell(r['worker_err_s']):>12} "
              f"{_cell(r['detect_s']):>12} {_cell(r['rdzv_s']):>12} {_cell(r['step_s']):>12} "
              f"{_fmt_n(r['worker_restarts_median']):>9}")
    for j in out["join_summary"]:
        ok = f"{j['recovered']}/{j['trials']}"
        restarted = sum(j["old_workers_restarted"])
        print(f"{j['variant']:<9} {j['kind']:<14} {ok:>5} {'-':>12} {_cell(j['detect_s']):>12} "
              f"{_cell(j['rdzv_s']):>12} {_cell(j['step_s']):>12} "
              f"{restarted:>4}/{sum(j['old_workers'])}")
    for f in out["faults"]:
        if f.get("outcome") and not f["recovered"]:
            err = ("" if f.get("rdzv_error_s") is None else
                   f"; first RendezvousConnectionError/Error after {f['rdzv_error_s']:.2f} s")
            print(f"{f['variant']} {f['kind']} trial {f['trial']}: NOT recovered: {f['outcome']} "
                  f"{f['gave_up_s']:.2f} s after the kill{err}")
    print("cells: median/max seconds from the SIGKILL (node-join: from starting the node).")
    print("worker_err: a surviving worker's allreduce failed; detect(a): a torchrun agent logged "
          "the failure (node-join: noticed the waiting node); rdzv(b): rendezvous complete at the "
          "new world size; step(c): first step at the new world size.")
    print("restarted: worker processes on the surviving (node-join: already running) nodes that "
          "torchrun started anew (median per fault; node-join: total over trials / running workers).")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "analyze":
        p = argparse.ArgumentParser(prog="recovery_torchrun.py analyze")
        p.add_argument("dir")
        p.add_argument("--json")
        p.add_argument("--tsv", help="one line per summary row, for bench/recovery.sh")
        return analyze(p.parse_args(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "wait":
        p = argparse.ArgumentParser(prog="recovery_torchrun.py wait")
        p.add_argument("dir")
        p.add_argument("--nodes", required=True, help="comma-separated node numbers")
        p.add_argument("--world", type=int, required=True)
        p.add_argument("--after", type=float, required=True, help="time.time() of the event")
        p.add_argument("--steps", type=int, default=3)
        p.add_argument("--timeout", type=float, required=True, help="seconds")
        p.add_argument("--alive", default="", help="comma-separated pids; give up when all are gone")
        # 0.1 s: a tenth of the tuned monitor interval, far below the
        # latencies measured, and cheap (it only reads new log bytes).
        p.add_argument("--poll", type=float, default=0.1)
        return wait_cmd(p.parse_args(sys.argv[2:]))
    p = argparse.ArgumentParser(prog="recovery_torchrun.py")
    p.add_argument("--node", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--gloo-timeout", type=float, default=1800.0,
                   help="seconds; 1800 is torch's default for gloo")
    p.add_argument("--step-sleep", type=float, default=0.05)
    p.add_argument("--max-seconds", type=float, default=900.0,
                   help="a stray worker ends itself after this long")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    return worker(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
