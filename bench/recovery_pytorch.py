#!/usr/bin/env python3
"""Helper of bench/recovery_pytorch.sh: reads the logs, waits, analyses.

Every node's log (a torchrun node's timestamped output, or an agent's log)
carries the lines of bench/recovery_pytorch_ddp.py (examples/torchrun_ddp.py
with timestamps), found anywhere in a line as

    train rank=R world=W <message> t=<time.time()>

where <message> is "phase pid=… exec=… script=… imported=… pg=… ckpt=… ddp=…"
once per process (after DDP is built), "start step=…", "step=N loss=…" or
"done …".  Under torchrun one node runs one worker, under elastic-agent one
agent runs one worker, so the lines of a log after a phase line are that
process's.

  wait DIR --logs A,B --world W --after T --timeout S [--steps K]
      until every log has K steps at world W from a process whose phase line
      is after T; prints the time.time() it held; 0 held, 1 deadline.
  pid LOG
      the pid of the newest process in LOG (its phase line).
  progress --logs A,B --after T --timeout S
      (TorchFT's Lighthouse killed) waits S seconds, prints the time of the
      last step line after T; 0 if some log stepped in the last 10 s of the
      window (training went on), 1 if not.
  analyze OUT --json PATH
      reads OUT/events.jsonl and OUT/meta.json, prints the table, writes JSON.

bench/recovery_torchft.py (TorchFT) prints the same lines, its "phase" once
per quorum, like bench/recovery_pytorch_lib.py once per generation.

All times are seconds from the fault (the harness's $EPOCHREALTIME just
before the signal; for a join, before the new node is started).
"""
import argparse
import json
import os
import re
import statistics
import sys
import time

LINE = re.compile(r"train rank=(\d+) world=(\d+) (.*) t=(\d+\.\d+)\s*$")
# The library's per-generation line (elastic_agent/worker.py, _log_timing).
TIMING = re.compile(r"elastic_agent: INFO gen=(\d+) rank=(\d+) world=(\d+) sync=(\S+) timing (.*)$")
STAMPS = ["last_step", "prepare", "ready", "commit", "destroyed", "formed", "synced", "first_step"]
# The running ranks' stall at a join, stamp to stamp (ms).
STALL_PARTS = {
    "boundary": ("last_step", "prepare"),   # the old generation's last step -> PREPARE arrives
    "teardown": ("prepare", "ready"),       # abort + destroy the old group, READY sent
    "commit_wait": ("ready", "commit"),     # the others' READY (the joiner's too), the COMMIT
    "destroy": ("commit", "destroyed"),     # at COMMIT (already done at PREPARE: ~0)
    "form": ("destroyed", "formed"),        # TCPStore client + init_process_group, to the last rank's
    "sync": ("formed", "synced"),           # from the group formed: allreduce, state broadcast, allreduce
    "first_step": ("synced", "first_step"),  # the user's first step (DDP built, its allreduce, the sleep)
}
KV = re.compile(r"(\w+)=(\S+)")


def parse_line(line):
    m = LINE.search(line)
    if not m:
        return None
    rank, world, msg, t = int(m.group(1)), int(m.group(2)), m.group(3), float(m.group(4))
    r = {"rank": rank, "world": world, "t": t}
    if msg.startswith("phase "):
        r["ev"] = "phase"
        for k, v in KV.findall(msg):
            r[k] = int(v) if k == "pid" else float(v)
    elif msg.startswith("step="):
        r["ev"] = "step"
        r["step"] = int(msg.split()[0][5:])
    elif msg.startswith("start "):
        r["ev"] = "start"
    else:
        r["ev"] = "other"
    return r


class Log:
    """A growing log, read incrementally; records grouped by process."""

    def __init__(self, path):
        self.path, self.off, self.recs = path, 0, []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.off)
                data = f.read()
        except OSError:
            return
        cut = data.rfind(b"\n") + 1
        self.off += cut
        for line in data[:cut].decode(errors="replace").splitlines():
            r = parse_line(line)
            if r:
                self.recs.append(r)
        return self

    def processes(self, after):
        """[(phase record, [step records])] of processes whose phase is after `after`."""
        out, cur = [], None
        for r in self.recs:
            if r["ev"] == "phase":
                cur = (r, []) if r["t"] > after else None
                if cur:
                    out.append(cur)
            elif r["ev"] == "step" and cur is not None:
                cur[1].append(r)
        return out


def first_steps(log, world, after, until=float("inf")):
    """(phase, [steps at world]) of the first new process that stepped at world."""
    for ph, steps in log.processes(after):
        s = [x for x in steps if x["world"] == world and x["t"] <= until]
        if s:
            return ph, s
    return None, []


def wait_cmd(a):
    logs = [Log(p) for p in a.logs.split(",")]
    deadline = time.monotonic() + a.timeout
    while True:
        for lg in logs:
            lg.poll()
        if all(len(first_steps(lg, a.world, a.after)[1]) >= a.steps for lg in logs):
            print(f"{time.time():.6f}")
            return 0
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.1)


def step_times(path, after, until=float("inf")):
    lg = Log(path).poll() or Log(path)
    return [r["t"] for r in lg.recs if r["ev"] == "step" and after < r["t"] <= until]


def progress_cmd(a):
    time.sleep(a.timeout)
    ts = [t for p in a.logs.split(",") for t in step_times(p, a.after, a.after + a.timeout)]
    if ts:
        print(f"{max(ts):.6f}")
    return 0 if ts and max(ts) > a.after + a.timeout - 10 else 1


def pid_cmd(a):
    lg = Log(a.log).poll()
    ph = [r for r in (lg.recs if lg else []) if r["ev"] == "phase"]
    if not ph:
        return 1
    print(ph[-1]["pid"])
    return 0


# ------------------------------------------------------------------ analysis

def timing_lines(path, world, after, until):
    """The library's timing records at world W whose COMMIT came in (after, until]."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = TIMING.search(line)
                if not m or int(m.group(3)) != world:
                    continue
                r = {"gen": int(m.group(1)), "rank": int(m.group(2)), "sync": m.group(4)}
                for k, v in KV.findall(m.group(5)):
                    if k in STAMPS:
                        r[k] = float(v)
                if after < r.get("commit", 0) <= until:
                    out.append(r)
    except OSError:
        pass
    return out


def step_interval(log, before):
    """Median interval between consecutive steps of the log's newest process
    (generation) before `before`: the pace of undisturbed training."""
    ts = [r["t"] for r in log.recs if r["ev"] == "step" and r["t"] < before][-21:]
    iv = [b - a for a, b in zip(ts, ts[1:]) if b > a]
    return statistics.median(iv) if iv else None


def join_stall(e):
    """ours-inplace node-join: per running rank (every log but the joiner's,
    the last), the stall and its parts (ms).  The group is formed when its
    last rank (the joiner included) has formed it, so "form" runs from this
    rank's old group gone to that moment and "sync" (the state sync: its
    allreduce, the broadcast, the digest allreduce) from it to this rank's
    sync done; the ranks' clocks are one host's."""
    t0, until, world = e["t0"], e.get("t_end") or float("inf"), e["world"]
    tl = {}
    for p in e["logs"]:
        x = timing_lines(p, world, t0, until)
        if x:
            tl[p] = x[0]
    if len(tl) != len(e["logs"]):
        return []
    formed_all = max(t["formed"] for t in tl.values())
    ranks = []
    for p in e["logs"][:-1]:
        tm = dict(tl[p])
        if not all(tm.get(k) for k in STAMPS):
            continue
        tm["formed"] = formed_all
        lg = Log(p).poll() or Log(p)
        iv = step_interval(lg, tm["last_step"] + 1e-6)
        r = {k: round((tm[b] - tm[a]) * 1e3, 1) for k, (a, b) in STALL_PARTS.items()}
        r["gap"] = round((tm["first_step"] - tm["last_step"]) * 1e3, 1)
        r["step"] = round(iv * 1e3, 1) if iv else None
        # the stall: the gap minus the one step it holds anyway (undisturbed
        # training completes a step every `step`); beyond the broadcast: that
        # minus the state sync
        r["stall"] = round(r["gap"] - r["step"], 1) if iv else None
        r["beyond_sync"] = round(r["stall"] - r["sync"], 1) if iv else None
        ranks.append(r)
    return ranks


def ours_commit(path, world, after, until):
    """The first 'generation committed … world=W' line of an agent log after
    `after`, at the harness's stamp (the line's first field, $EPOCHREALTIME)."""
    pat = re.compile(r"generation committed gen=.* world=%d\b" % world)
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if pat.search(line):
                    try:
                        t = float(line.split(" ", 1)[0])
                    except ValueError:
                        continue
                    if after < t <= until:
                        return t
    except OSError:
        pass
    return None


def torchft_commit(path, world, after, until):
    """The Lighthouse's first 'Quorum! Quorum { … participants: [W members] }'
    line after `after`, at the harness's stamp."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "Quorum! Quorum {" not in line or line.count("QuorumMember {") != world:
                    continue
                try:
                    t = float(line.split(" ", 1)[0])
                except ValueError:
                    continue
                if after < t <= until:
                    return t
    except OSError:
        pass
    return None


def torchrun_commit(path, world, after, until):
    """'Rendezvous complete' at group_world_size W in a timestamped torchrun log."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from recovery_torchrun import _agent_events  # the torchrun harness's own parser
    ts = [t for (t, kind, v) in _agent_events(path, 0) if kind == "rdzv" and v == world and after < t <= until]
    return min(ts) if ts else None


PHASES = ["commit", "spawn", "python", "import_torch", "import_rest", "gloo_init", "ckpt_load", "ddp", "first_step"]
PHASE_DOC = {
    "commit": "fault -> new generation committed (ours: the agent logs it; torchrun: rendezvous complete)",
    "spawn": "commit -> the gating process exec'd (stop the old workers, fork/exec)",
    "python": "exec -> the script's first line (interpreter start-up)",
    "import_torch": "the script's first line -> `import torch` done (argparse, json, os, sys before it)",
    "import_rest": "torch.distributed, elastic's @record, DDP imported",
    "gloo_init": "argument parsing + init_process_group: TCPStore + gloo rendezvous of the new group",
    "ckpt_load": "the script's torch.load of its checkpoint + model/optimizer state",
    "ddp": "DistributedDataParallel(model): its parameter broadcast",
    "first_step": "DDP built -> first step completed (one step, its allreduce and 50 ms sleep at most)",
}


def analyze_event(e):
    t0, until, world = e["t0"], e.get("t_end") or float("inf"), e["world"]
    logs = [Log(p).poll() or Log(p) for p in e["logs"]]
    firsts, procs = [], []
    for lg in logs:
        ph, steps = first_steps(lg, world, t0, until)
        if steps:
            firsts.append(steps[0]["t"])
            procs.append(ph)
    res = {k: e[k] for k in ("system", "kind", "trial", "world", "recovered")}
    res["step_s"] = round(min(firsts) - t0, 3) if firsts else None
    res["nodes_stepped"] = len(firsts)
    if e["kind"] == "spof" and e["system"].startswith("torchft"):
        # the Lighthouse killed: the replica groups keep their processes;
        # did committed steps go on, and until when
        ts = [t for p in e["logs"] for t in step_times(p, t0, t0 + 60)]
        res["step_s"] = None
        res["steps_after"] = len(ts)
        res["last_step_s"] = round(max(ts) - t0, 3) if ts else None
        res["commit_s"] = None
        return res
    commit = None
    for p in e.get("agent_logs", e["logs"]):
        f = (ours_commit if e["system"].startswith("ours") else
             torchft_commit if e["system"].startswith("torchft") else torchrun_commit)
        c = f(p, world, t0, until)
        if c is not None and (commit is None or c < commit):
            commit = c
    res["commit_s"] = round(commit - t0, 3) if commit else None
    if e["system"] == "ours-inplace" and e["kind"] == "node-join":
        res["join_stall"] = join_stall(e)
    if procs and firsts and len(procs) == len(logs) and e["system"] in ("ours", "torchrun-default", "torchrun-tuned"):
        g = max(procs, key=lambda p: p["imported"])  # the last to be ready gates gloo
        marks = [commit if commit else g["exec"], g["exec"], g["script"], g["torch"], g["imported"], g["pg"],
                 g["ckpt"], g["ddp"], min(firsts)]
        prev, br = t0, {}
        for name, m in zip(PHASES, marks):
            br[name] = round(m - prev, 3)
            prev = m
        res["breakdown"] = br
        res["exec_spread_s"] = round(max(p["exec"] for p in procs) - min(p["exec"] for p in procs), 3)
    return res


def _stat(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "max": None, "n": 0}
    return {"median": round(statistics.median(xs), 2), "max": round(max(xs), 2), "n": len(xs)}


def _cell(s):
    return "-" if s["median"] is None else f"{s['median']:.2f} ({s['max']:.2f})"


KINDS = ["node-kill", "node-stop", "worker-kill", "worker-back", "node-join", "spof"]
STALL_COLS = ["gap", "step", "stall", "sync", "beyond_sync"] + [k for k in STALL_PARTS if k != "sync"]
SYSTEMS = ["torchrun-default", "torchrun-tuned", "ours", "ours-inplace", "torchft", "torchft-tuned"]


def analyze(a):
    meta = json.load(open(os.path.join(a.out, "meta.json")))
    evs = []
    with open(os.path.join(a.out, "events.jsonl")) as f:
        for line in f:
            if line.strip():
                evs.append(json.loads(line))
    results = [analyze_event(e) for e in evs]
    summary = {}
    for s in SYSTEMS:
        for k in KINDS:
            rs = [r for r in results if r["system"] == s and r["kind"] == k]
            if not rs:
                continue
            row = {"trials": len(rs), "recovered": sum(1 for r in rs if r["recovered"]),
                   "step_s": _stat([r["step_s"] for r in rs]),
                   "commit_s": _stat([r["commit_s"] for r in rs])}
            js = [x for r in rs for x in r.get("join_stall") or []]
            if js:
                row["join_stall_median_ms"] = {c: round(statistics.median(x[c] for x in js if x[c] is not None), 1)
                                               for c in STALL_COLS if any(x[c] is not None for x in js)}
                row["join_stall_max_ms"] = {c: max(x[c] for x in js if x[c] is not None)
                                            for c in STALL_COLS if any(x[c] is not None for x in js)}
                row["join_stall_ranks"] = len(js)
            if k == "spof":
                row["events"] = [{x: r.get(x) for x in ("recovered", "step_s", "steps_after", "last_step_s")}
                                 for r in rs]
            bs = [r["breakdown"] for r in rs if r.get("breakdown")]
            if bs:
                row["breakdown_median_s"] = {p: round(statistics.median(b[p] for b in bs), 3) for p in PHASES}
            summary.setdefault(s, {})[k] = row
    ratios = {}
    for k in KINDS:
        o = summary.get("ours", {}).get(k, {}).get("step_s", {}).get("median")
        for s in ("torchrun-default", "torchrun-tuned"):
            t = summary.get(s, {}).get(k, {}).get("step_s", {}).get("median")
            if o and t:
                ratios.setdefault(k, {})[s] = round(t / o, 1)
        o = summary.get("ours-inplace", {}).get(k, {}).get("step_s", {}).get("median")
        for s in ("torchft", "torchft-tuned"):
            t = summary.get(s, {}).get(k, {}).get("step_s", {}).get("median")
            if o and t:
                ratios.setdefault(k, {})[s + "/inplace"] = round(t / o, 1)
    out = {"bench": "recovery-pytorch", "meta": meta, "summary": summary,
           "ratio_torchrun_over_ours": ratios, "phases": PHASE_DOC, "events": results}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print_table(out)
    return 0


def print_table(out):
    m, s, rt = out["meta"], out["summary"], out["ratio_torchrun_over_ours"]
    print(f"recovery of a torchrun script (bench/recovery_pytorch_ddp.py = examples/torchrun_ddp.py + "
          f"timestamps), torch {m.get('torch')}, {m.get('cpus')} cpus, 4 nodes on 127.0.0.1")
    print(f"load average at start: {m.get('loadavg_start')}   at end: {m.get('loadavg_end')}   "
          f"trials: {m.get('trials')}   wall: {m.get('wall_s', '?')} s")
    print("seconds from the fault to the first step completed at the new world size, median (max) [ok/trials]")
    hdr = (f"{'event':<12} {'torchrun default':>22} {'torchrun tuned':>22} {'elastic-agent':>22} "
           f"{'ea in-place':>22} {'torchft':>22} {'torchft tuned':>22} {'default/ours':>12} {'tuned/ours':>10} "
           f"{'tft/inpl':>8} {'tftt/inpl':>9}")
    print(hdr)
    print("-" * len(hdr))
    for k in KINDS:
        if k == "spof":
            continue
        cells = []
        for sy in SYSTEMS:
            r = s.get(sy, {}).get(k)
            cells.append("-" if not r else f"{_cell(r['step_s'])} [{r['recovered']}/{r['trials']}]")
        rd = rt.get(k, {}).get("torchrun-default")
        rtu = rt.get(k, {}).get("torchrun-tuned")
        f1 = rt.get(k, {}).get("torchft/inplace")
        f2 = rt.get(k, {}).get("torchft-tuned/inplace")
        print(f"{k:<12} " + " ".join(f"{c:>22}" for c in cells) + " "
              f"{(f'{rd}x' if rd else '-'):>12} {(f'{rtu}x' if rtu else '-'):>10} "
              f"{(f'{f1}x' if f1 else '-'):>8} {(f'{f2}x' if f2 else '-'):>9}")
    print()
    print("the single point of failure, once per system, 60 s deadline: torchrun's c10d store host (node 0), "
          "elastic-agent's controller node, TorchFT's Lighthouse (SIGKILL)")
    for sy in SYSTEMS:
        r = s.get(sy, {}).get("spof")
        if not r:
            continue
        for ev in r["events"]:
            if sy.startswith("torchft"):
                what = (f"training went on ({ev['steps_after']} steps, last at +{ev['last_step_s']} s)"
                        if ev["recovered"] else
                        f"training stopped: {ev['steps_after']} committed step lines after the kill"
                        + (f", the last at +{ev['last_step_s']} s" if ev["last_step_s"] is not None else "")
                        + "; not recovered within 60 s")
            else:
                what = (f"recovered: first step at world 3 after {ev['step_s']:.2f} s" if ev["recovered"]
                        else "not recovered within 60 s")
            print(f"  {sy:<17} {what}")
    print("node-join: from starting the new node's agent.  node-stop: SIGSTOP of agent and worker; "
          "torchrun's script runs with a 10 s gloo timeout (ours with the script's default, 30 min).")
    print("elastic-agent: restart mode (the torchrun script, unchanged); ea in-place: the same model driven by "
          "`import elastic_agent` (bench/recovery_pytorch_lib.py), the same processes; its worker-kill is to the "
          "first step at world 3 (the survivors, without the restarting worker), worker-back the same kill to "
          "world 4 with the restarted worker back; the ratios are torchrun / restart mode.")
    j = s.get("ours-inplace", {}).get("node-join", {})
    if j.get("join_stall_median_ms"):
        med, mx = j["join_stall_median_ms"], j["join_stall_max_ms"]
        print()
        print(f"ea in-place, the running ranks' stall at a join (ms, median (max) over {j['join_stall_ranks']} "
              "rank-joins), from the library's timing line:")
        print("  " + "  ".join(f"{c}={med[c]:.1f} ({mx[c]:.1f})" for c in STALL_COLS if c in med))
        print("  gap: last step of the old generation -> first step of the new; step: the median step interval "
              "before (one step the gap holds anyway); stall = gap - step; beyond_sync = stall - sync (the state "
              "broadcast and its two allreduces)")
        print("  parts of the gap: " + ", ".join(f"{k} = {a} -> {b}" for k, (a, b) in STALL_PARTS.items()))
    print()
    print("where the seconds go, median per phase (s); the gating process = the last of the new group to finish import")
    hdr = f"{'system':<17} {'event':<12} " + " ".join(f"{p:>12}" for p in PHASES)
    print(hdr)
    print("-" * len(hdr))
    for sy in SYSTEMS:
        for k in KINDS:
            b = s.get(sy, {}).get(k, {}).get("breakdown_median_s")
            if b:
                print(f"{sy:<17} {k:<12} " + " ".join(f"{b[p]:>12.2f}" for p in PHASES))
    for p in PHASES:
        print(f"  {p}: {PHASE_DOC[p]}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("--logs", required=True)
    w.add_argument("--world", type=int, required=True)
    w.add_argument("--after", type=float, required=True)
    w.add_argument("--timeout", type=float, required=True)
    w.add_argument("--steps", type=int, default=2)
    g = sub.add_parser("progress")
    g.add_argument("--logs", required=True)
    g.add_argument("--after", type=float, required=True)
    g.add_argument("--timeout", type=float, required=True)
    q = sub.add_parser("pid")
    q.add_argument("log")
    an = sub.add_parser("analyze")
    an.add_argument("out")
    an.add_argument("--json", required=True)
    a = p.parse_args()
    return {"wait": wait_cmd, "pid": pid_cmd, "progress": progress_cmd, "analyze": analyze}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
