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
      is after T (--any-process: from any process); prints the time.time()
      it held; 0 held, 1 deadline.
  pid LOG
      the pid of the newest process in LOG (its phase line).
  progress --logs A,B --after T --timeout S
      (TorchFT's Lighthouse killed) waits S seconds, prints the time of the
      last step line after T; 0 if some log stepped in the last 10 s of the
      window (training went on), 1 if not.
  spares --agent BIN --data-dirs D1,D2 --timeout S [--record F --system X --before K --trial N]
      (elastic-agent systems) waits until every worker slot of every agent
      has its warm interpreter ready (status --json: workers[].spare.state
      "ready"; "off" counts as done: compute.warm_start=off); 0 when all
      were, 1 at the deadline; appends one JSON line to F (how long, the
      states).
  analyze OUT [OUT2 …] --json PATH
      reads OUT/events.jsonl and OUT/meta.json (of several runs: their events
      together, every run's meta under "runs"), prints the table, writes JSON.

In an agent's log (elastic-agent systems) the analysis also reads the
agent's own lines at the agent's own time (the ISO stamp it writes):
"worker I started pid=P (PROG, warm)" / "(PROG, warm: still importing)" /
"(PROG)" — how each worker of a new generation started (a warm interpreter
taken ready, one taken before its preload was done, or a cold spawn) —
"state=…->dead" / "worker I pid=P exited" / "state=new->alive" (detection)
and "generation committed … world=W".

bench/recovery_torchft.py (TorchFT) and bench/recovery_nvrx.py (NVRx: once
per restart iteration of its wrapper, with the iteration's begin=) print
the same lines; TorchFT's "phase" once
per quorum, like bench/recovery_pytorch_lib.py once per generation.

All times are seconds from the fault (the harness's $EPOCHREALTIME just
before the signal; for a join, before the new node is started).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
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

    def count(lg):
        if a.any_process:  # steps at W after T from any process, new or not
            return sum(1 for r in lg.recs if r["ev"] == "step" and r["world"] == a.world and r["t"] > a.after)
        return len(first_steps(lg, a.world, a.after)[1])

    deadline = time.monotonic() + a.timeout
    while True:
        for lg in logs:
            lg.poll()
        if all(count(lg) >= a.steps for lg in logs):
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


def spares_cmd(a):
    """Wait until every agent's every worker slot has a ready warm interpreter."""
    t_start = time.time()
    deadline = time.monotonic() + a.timeout
    dirs = [d for d in a.data_dirs.split(",") if d]
    while True:
        states = {}
        for d in dirs:
            try:
                r = subprocess.run([a.agent, "status", "--json", "--data-dir", d], capture_output=True,
                                   text=True, timeout=5)
                ws = json.loads(r.stdout).get("workers") or []
                states[d] = [(w.get("spare") or {}).get("state", "?") for w in ws] or ["no workers"]
            except (OSError, ValueError, subprocess.TimeoutExpired) as e:
                states[d] = ["status failed: %s" % type(e).__name__]
        ok = all(x in ("ready", "off") for v in states.values() for x in v)
        if ok or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    rec = {"system": a.system, "before": a.before, "trial": a.trial, "t": round(t_start, 3),
           "waited_s": round(time.time() - t_start, 3), "ok": ok,
           "states": {os.path.basename(os.path.dirname(d.rstrip("/"))) or d: v for d, v in states.items()}}
    if a.record:
        with open(a.record, "a") as f:
            f.write(json.dumps(rec) + "\n")
    print(f"spares {'ready' if ok else 'NOT ready'} after {rec['waited_s']:.1f} s: {rec['states']}", file=sys.stderr)
    return 0 if ok else 1


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


ISO = re.compile(r"^(\d+\.\d+) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")


def agent_lines(path):
    """[(t, line)] of an agent log: t = the agent's own ISO stamp (ms) when the
    line is the agent's, else the harness's $EPOCHREALTIME stamp."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = ISO.match(line)
                try:
                    if m:
                        t = datetime.datetime.strptime(m.group(2), "%Y-%m-%dT%H:%M:%S.%f").replace(
                            tzinfo=datetime.timezone.utc).timestamp()
                    else:
                        t = float(line.split(" ", 1)[0])
                except ValueError:
                    continue
                out.append((t, line.rstrip("\n")))
    except OSError:
        pass
    return out


def first_agent_line(paths, pat, after, until):
    """The agent time of the first line matching pat in any of paths in (after, until]."""
    best = None
    for p in paths:
        for t, line in agent_lines(p):
            if after < t <= until and pat.search(line):
                if best is None or t < best:
                    best = t
                break
    return best


def ours_commit(path, world, after, until):
    """The first 'generation committed … world=W' line of an agent log after
    `after`, at the agent's own time."""
    return first_agent_line([path], re.compile(r"generation committed gen=.* world=%d\b" % world), after, until)


# What tells an agent the fault happened (the earliest line in any agent log).
DETECT = {
    "node-kill": re.compile(r"\bstate=\w+->dead\b"),
    "node-stop": re.compile(r"\bstate=\w+->dead\b"),
    "spof": re.compile(r"\bstate=\w+->dead\b"),
    "worker-kill": re.compile(r" worker \d+ pid=\d+ exited\b"),
    "worker-back": re.compile(r" worker \d+ pid=\d+ exited\b"),
    "node-join": re.compile(r"\bstate=new->alive\b"),
}
START = re.compile(r" worker (\d+) started pid=(\d+) \((.*)\)\s*$")


def worker_start(path, pid, after, until):
    """How process pid of this agent log started after `after`: (kind, agent
    time) with kind "warm" (a ready warm interpreter taken), "warm-importing"
    (taken before its preload was done), "cold" (spawned), or ("kept", None)
    when the process was not started in (after, until] (the library's
    survivors)."""
    for t, line in agent_lines(path):
        if not (after < t <= until):
            continue
        m = START.search(line)
        if m and int(m.group(2)) == pid:
            how = m.group(3)
            kind = ("warm-importing" if how.endswith("warm: still importing") else
                    "warm" if how.endswith(", warm") else "cold")
            return kind, t
    return "kept", None


def first_stamped(path, match, after, until):
    """The harness's stamp of the first line of `path` in (after, until] that
    match(line) accepts."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if not match(line):
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


def first_marked_line(paths, text, after, until):
    """The earliest stamp, over `paths`, of a line holding `text`."""
    ts = [t for t in (first_stamped(p, lambda line: text in line, after, until) for p in paths) if t is not None]
    return min(ts) if ts else None


FTL_ROUND = re.compile(r"has joined round \d+ of the rendezvous .* in a world of size (\d+)")


def ftl_commit(path, world, after, until):
    """ft_launcher (NVRx in-job): its node joined a rendezvous round of W nodes."""
    def match(line):
        m = FTL_ROUND.search(line)
        return bool(m) and int(m.group(1)) == world
    return first_stamped(path, match, after, until)


def torchft_commit(path, world, after, until):
    """The Lighthouse's first 'Quorum! Quorum { … participants: [W members] }'
    line after `after`, at the harness's stamp."""
    return first_stamped(path, lambda line: "Quorum! Quorum {" in line and line.count("QuorumMember {") == world,
                         after, until)


def torchrun_commit(path, world, after, until):
    """'Rendezvous complete' at group_world_size W in a timestamped torchrun log."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from recovery_torchrun import _agent_events  # the torchrun harness's own parser
    ts = [t for (t, kind, v) in _agent_events(path, 0) if kind == "rdzv" and v == world and after < t <= until]
    return min(ts) if ts else None


PHASES = ["detect", "commit", "spawn", "python", "import_torch", "import_rest", "gloo_init", "ckpt_load", "ddp",
          "first_step"]
PHASE_DOC = {
    "detect": "fault -> the first agent's log says so (node lost: a member's state=...->dead; worker killed: "
              "'worker I pid=P exited'; join: the new member state=new->alive); NVRx: a survivor's wrapper "
              "logs the exception (fn_ex); not for torchrun (it logs no such line: its detection is inside commit)",
    "commit": "detection (torchrun: the fault) -> new generation committed (ours: the agent logs it; "
              "torchrun: rendezvous complete; NVRx: the last rank's new restart iteration begins)",
    "spawn": "commit -> the gating process started: cold, exec'd (/proc's start time; stop the old workers, "
             "fork/exec); warm, the agent's 'worker I started pid=P (..., warm)' line (stop the old workers, "
             "hand the spare its argv/environment/output)",
    "python": "that start -> the script's first line (cold: interpreter start-up; warm: the handover read, the "
              "environment, chdir, the script compiled, plus the rest of the preload if the spare was taken "
              "'still importing')",
    "import_torch": "the script's first line -> `import torch` done (argparse, json, os, sys before it; warm: "
                    "already in sys.modules)",
    "import_rest": "torch.distributed, elastic's @record, DDP imported",
    "gloo_init": "argument parsing + init_process_group: TCPStore + gloo rendezvous of the new group",
    "ckpt_load": "the script's torch.load of its checkpoint + model/optimizer state",
    "ddp": "DistributedDataParallel(model): its parameter broadcast",
    "first_step": "DDP built -> first step completed (one step, its allreduce and 50 ms sleep at most)",
}
BREAKDOWN_SYSTEMS = ("ours", "ours-cold", "torchrun-default", "torchrun-tuned", "nvrx-injob")
INPROCESS_NVRX = ("nvrx", "nvrx-tuned")


def analyze_event(e):
    t0, until, world = e["t0"], e.get("t_end") or float("inf"), e["world"]
    logs = [Log(p).poll() or Log(p) for p in e["logs"]]
    firsts, procs, plogs = [], [], []
    for p, lg in zip(e["logs"], logs):
        ph, steps = first_steps(lg, world, t0, until)
        if steps:
            firsts.append(steps[0]["t"])
            procs.append(ph)
            plogs.append(p)
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
    ours = e["system"].startswith("ours")
    commit = None
    if e["system"] in INPROCESS_NVRX:
        # NVRx in process: the wrapper called the function again: the
        # 'begin' of the first new iteration that stepped
        bs = [ph.get("begin") for ph in procs if ph.get("begin")]
        commit = min(bs) if bs else None
    for p in ([] if e["system"] in INPROCESS_NVRX else e.get("agent_logs", e["logs"])):
        f = (ours_commit if ours else
             torchft_commit if e["system"].startswith("torchft") else
             ftl_commit if e["system"] == "nvrx-injob" else torchrun_commit)
        c = f(p, world, t0, until)
        if c is not None and (commit is None or c < commit):
            commit = c
    res["commit_s"] = round(commit - t0, 3) if commit else None
    detect = None
    if ours and e["kind"] in DETECT:
        detect = first_agent_line(e.get("agent_logs", e["logs"]), DETECT[e["kind"]], t0, until)
    res["detect_s"] = round(detect - t0, 3) if detect else None
    starts = {}
    if ours:
        # how each process of the new group started (warm, still importing, cold)
        res["starts"] = []
        for p, ph in zip(plogs, procs):
            kind, ts = worker_start(p, ph["pid"], t0, ph["t"])
            starts[id(ph)] = (kind, ts)
            res["starts"].append({"node": os.path.basename(p)[:-4], "pid": ph["pid"], "start": kind,
                                  "at_s": round(ts - t0, 3) if ts else None})
    if e["system"] == "ours-inplace" and e["kind"] == "node-join":
        res["join_stall"] = join_stall(e)
    if procs and firsts and len(procs) == len(logs) and e["system"] in INPROCESS_NVRX:
        # in the same processes: detect = the first survivor's wrapper logs
        # the exception (fn_ex), commit = the last rank's new iteration
        # begins (the wrapper's abort, health check, barrier and rank
        # assignment), then that rank's gloo group, checkpoint, DDP, step
        g = max(procs, key=lambda p: p.get("begin", 0))
        det = first_marked_line(e["logs"], " fn_ex: ", t0, until)
        marks = [det, g.get("begin"), None, None, None, None, g["pg"], g["ckpt"], g["ddp"], min(firsts)]
        prev, br = t0, {}
        for name, m in zip(PHASES, marks):
            br[name] = None if m is None else round(m - prev, 3)
            prev = prev if m is None else m
        res["breakdown"] = br
        res["gating_start"] = "kept"
        res["detect_s"] = br["detect"]
    elif procs and firsts and len(procs) == len(logs) and e["system"] in BREAKDOWN_SYSTEMS:
        g = max(procs, key=lambda p: p["imported"])  # the last to be ready gates gloo
        kind, ts = starts.get(id(g), ("cold", None))
        started = ts if kind.startswith("warm") and ts else g["exec"]
        marks = [detect, commit if commit else started, started, g["script"], g["torch"], g["imported"], g["pg"],
                 g["ckpt"], g["ddp"], min(firsts)]
        prev, br = t0, {}
        for name, m in zip(PHASES, marks):
            if m is None:
                br[name] = None
                continue
            br[name] = round(m - prev, 3)
            prev = m
        res["breakdown"] = br
        res["gating_start"] = kind if ours else "cold"
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
SYSTEMS = ["torchrun-default", "torchrun-tuned", "ours", "ours-cold", "ours-inplace", "torchft", "torchft-tuned",
           "nvrx", "nvrx-tuned", "nvrx-injob"]
LABELS = {"torchrun-default": "torchrun default", "torchrun-tuned": "torchrun tuned", "ours": "ea warm",
          "ours-cold": "ea cold", "ours-inplace": "ea in-place", "torchft": "torchft", "torchft-tuned": "torchft tuned",
          "nvrx": "nvrx", "nvrx-tuned": "nvrx tuned", "nvrx-injob": "nvrx in-job"}
START_KINDS = ["warm", "warm-importing", "cold", "kept"]


def _read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


def analyze(a):
    metas = [json.load(open(os.path.join(o, "meta.json"))) for o in a.out]
    meta = dict(metas[0])
    if len(metas) > 1:
        meta["runs"] = metas
        meta["command"] = " ; ".join(m.get("command", "?") for m in metas)
        meta["loadavg_start"] = " | ".join(m.get("loadavg_start", "?") for m in metas)
        meta["loadavg_end"] = " | ".join(m.get("loadavg_end", "?") for m in metas)
        meta["trials"] = "/".join(str(m.get("trials")) for m in metas)
        meta["wall_s"] = sum(m.get("wall_s", 0) for m in metas)
    evs, waits = [], []
    for o in a.out:
        evs += _read_jsonl(os.path.join(o, "events.jsonl"))
        waits += _read_jsonl(os.path.join(o, "spares.jsonl"))
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
            row["detect_s"] = _stat([r.get("detect_s") for r in rs])
            bs = [r["breakdown"] for r in rs if r.get("breakdown")]
            if bs:
                row["breakdown_median_s"] = {
                    p: (round(statistics.median(b[p] for b in bs if b[p] is not None), 3)
                        if any(b[p] is not None for b in bs) else None) for p in PHASES}
                row["breakdown_max_s"] = {
                    p: (max(b[p] for b in bs if b[p] is not None)
                        if any(b[p] is not None for b in bs) else None) for p in PHASES}
                row["gating_starts"] = [r.get("gating_start") for r in rs if r.get("breakdown")]
            st = [x["start"] for r in rs for x in r.get("starts") or []]
            if st:
                row["starts"] = {c: st.count(c) for c in START_KINDS if st.count(c)}
            summary.setdefault(s, {})[k] = row
    ratios = {}
    for k in KINDS:
        for mine, suffix in (("ours", ""), ("ours-cold", "/cold")):
            o = summary.get(mine, {}).get(k, {}).get("step_s", {}).get("median")
            for s in ("torchrun-default", "torchrun-tuned"):
                t = summary.get(s, {}).get(k, {}).get("step_s", {}).get("median")
                if o and t:
                    ratios.setdefault(k, {})[s + suffix] = round(t / o, 1)
        o = summary.get("ours", {}).get(k, {}).get("step_s", {}).get("median")
        c = summary.get("ours-cold", {}).get(k, {}).get("step_s", {}).get("median")
        if o and c:
            ratios.setdefault(k, {})["cold/warm"] = round(c / o, 1)
        o = summary.get("ours-inplace", {}).get(k, {}).get("step_s", {}).get("median")
        for s in ("torchft", "torchft-tuned", "nvrx", "nvrx-tuned"):
            t = summary.get(s, {}).get(k, {}).get("step_s", {}).get("median")
            if o and t:
                ratios.setdefault(k, {})[s + "/inplace"] = round(t / o, 1)
    out = {"bench": "recovery-pytorch", "meta": meta, "summary": summary,
           "ratio_torchrun_over_ours": ratios, "phases": PHASE_DOC, "spare_waits": waits, "events": results}
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
    shown = [sy for sy in SYSTEMS if sy in s]
    rcols = [("torchrun-default", "default/warm"), ("torchrun-tuned", "tuned/warm"),
             ("torchrun-default/cold", "default/cold"), ("torchrun-tuned/cold", "tuned/cold"),
             ("cold/warm", "cold/warm"), ("torchft/inplace", "tft/inpl"), ("torchft-tuned/inplace", "tftt/inpl"),
             ("nvrx/inplace", "nvrx/inpl"), ("nvrx-tuned/inplace", "nvrxt/inpl")]
    rcols = [(k, h) for k, h in rcols if any(k in rt.get(x, {}) for x in KINDS)]
    hdr = (f"{'event':<12} " + " ".join(f"{LABELS[sy]:>20}" for sy in shown) + " "
           + " ".join(f"{h:>12}" for _, h in rcols))
    print(hdr)
    print("-" * len(hdr))
    for k in KINDS:
        if k == "spof":
            continue
        cells = []
        for sy in shown:
            r = s.get(sy, {}).get(k)
            cells.append("-" if not r else f"{_cell(r['step_s'])} [{r['recovered']}/{r['trials']}]")
        if all(c == "-" for c in cells):
            continue
        print(f"{k:<12} " + " ".join(f"{c:>20}" for c in cells) + " "
              + " ".join(f"{(str(rt[k][key]) + 'x') if key in rt.get(k, {}) else '-':>12}" for key, _ in rcols))
    print()
    print("the single point of failure, once per system, 60 s deadline: torchrun's c10d store host (node 0), "
          "elastic-agent's controller node, TorchFT's Lighthouse, NVRx's node 0 (the stores' host) (SIGKILL)")
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
    print("ea warm / ea cold: restart mode (the torchrun script, unchanged), compute.warm_start auto (the default: "
          "a warm interpreter per local rank) / off; ea in-place: the same model driven by "
          "`import elastic_agent` (bench/recovery_pytorch_lib.py), the same processes; its worker-kill is to the "
          "first step at world 3 (the survivors, without the restarting worker), worker-back the same kill to "
          "world 4 with the restarted worker back; the ratios are torchrun / restart mode (warm, cold), cold / warm.")
    if any(sy.startswith("nvrx") for sy in s):
        print("nvrx, nvrx tuned: ft_launcher (min-healthy) + inprocess.Wrapper, a fresh cluster per fault; node-kill, node-stop "
              "and worker-kill are to the first step at world 3 (the survivors, in the same processes); node-join "
              "is node 3 started again after the node-kill: min-healthy takes no node back ('prevents unintended "
              "upscaling'), so it is expected not to recover (30 s deadline); nvrx in-job: ft_launcher's any-failed "
              "policy alone (every worker restarted), timed as torchrun")
    _print_starts(out)
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
    print("where the seconds go, median per phase (s) [max]; the gating process = the last of the new group to "
          "finish import; start = how it started (w warm, i warm but still importing, c cold)")
    hdr = f"{'system':<17} {'event':<12} " + " ".join(f"{p:>13}" for p in PHASES) + "  start"
    print(hdr)
    print("-" * len(hdr))
    for sy in SYSTEMS:
        for k in KINDS:
            r = s.get(sy, {}).get(k, {})
            b, bm = r.get("breakdown_median_s"), r.get("breakdown_max_s")
            if b:
                cells = ["-" if b[p] is None else f"{b[p]:.2f} [{bm[p]:.2f}]" for p in PHASES]
                gs = "".join({"warm": "w", "warm-importing": "i", "cold": "c", "kept": "k"}.get(x, "?")
                             for x in r.get("gating_starts", []))
                print(f"{sy:<17} {k:<12} " + " ".join(f"{c:>13}" for c in cells) + f"  {gs}")
    for p in PHASES:
        print(f"  {p}: {PHASE_DOC[p]}")


def _print_starts(out):
    """How the workers of each new generation started, and the waits for the spares."""
    s = out["summary"]
    lines = []
    for sy in ("ours", "ours-cold", "ours-inplace"):
        for k in KINDS:
            st = s.get(sy, {}).get(k, {}).get("starts")
            if st:
                lines.append(f"  {sy:<13} {k:<12} " + ", ".join(f"{n} {c}" for c, n in st.items()))
    if not lines:
        return
    print()
    print("how the restarted workers started (one per node that stepped at the new size; warm-importing: a warm "
          "interpreter taken before its preload was done; kept: the same process, not restarted):")
    for x in lines:
        print(x)
    for e in out["events"]:
        bad = [x for x in e.get("starts") or [] if x["start"] not in ("warm", "kept")]
        if e["system"] != "ours" or not bad:
            continue
        print(f"  not warm: ours {e['kind']} trial {e['trial']}: "
              + ", ".join(f"{x['node']} pid {x['pid']} {x['start']}"
                          + (f" (+{x['at_s']:.2f} s)" if x["at_s"] is not None else "") for x in bad))
    w = [x for x in out.get("spare_waits", []) if x.get("system") == "ours"]
    if w:
        ok = sum(1 for x in w if x["ok"])
        ws = sorted(x["waited_s"] for x in w)
        print(f"  ea warm: before each fault the bench waited for every agent's spare to be ready: {ok}/{len(w)} "
              f"ready in time; waited median {statistics.median(ws):.1f} s, max {ws[-1]:.1f} s")
        for x in w:
            if not x["ok"]:
                print(f"    not ready before {x['before']} trial {x['trial']}: {x['states']}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wait")
    w.add_argument("--logs", required=True)
    w.add_argument("--world", type=int, required=True)
    w.add_argument("--after", type=float, required=True)
    w.add_argument("--timeout", type=float, required=True)
    w.add_argument("--steps", type=int, default=2)
    w.add_argument("--any-process", action="store_true")
    g = sub.add_parser("progress")
    g.add_argument("--logs", required=True)
    g.add_argument("--after", type=float, required=True)
    g.add_argument("--timeout", type=float, required=True)
    q = sub.add_parser("pid")
    q.add_argument("log")
    sp = sub.add_parser("spares")
    sp.add_argument("--agent", required=True)
    sp.add_argument("--data-dirs", required=True)
    sp.add_argument("--timeout", type=float, required=True)
    sp.add_argument("--record")
    sp.add_argument("--system", default="")
    sp.add_argument("--before", default="")
    sp.add_argument("--trial", type=int, default=0)
    an = sub.add_parser("analyze")
    an.add_argument("out", nargs="+")
    an.add_argument("--json", required=True)
    a = p.parse_args()
    return {"wait": wait_cmd, "pid": pid_cmd, "progress": progress_cmd, "spares": spares_cmd,
            "analyze": analyze}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
