#!/usr/bin/env python3
"""bench/goodput.sh's analysis: goodput under churn, the table, JSON, a PNG.

  goodput.py OUT --json PATH --png PATH

reads OUT/meta.json and OUT/runs.jsonl (one line per system: the baseline
and churn windows, the kill and rejoin times, the node logs) and the node
logs' step lines (bench/recovery_pytorch.py's format: "train rank=R world=W
step=N loss=L t=T", "start step=N …", TorchFT's "discard step=N quorum=Q").

Per system, from the merged step lines of its nodes:
  model step at t   the step number of the newest step line at or before t
                    (a restart resumes from its checkpoint, so the number
                    falls back: those steps are thrown away)
  kept(t)           the steps at t that survive into the final model:
                    min over the step lines from t to the end of the churn
  goodput           (kept steps in the churn / churn seconds) ÷ the
                    baseline's steps per second (the same system, no failure)
  computed          kept + thrown away: wherever the step number falls back
                    (by more than the one step ranks may be apart), the
                    steps between (a restart from a checkpoint, a state
                    lost), plus TorchFT's steps not committed ("discard")
  thrown/failure    (computed − kept) / failures
  s lost/failure    (churn seconds − kept / baseline rate) / failures
  pause             per kill: the longest gap between step lines from the
                    kill to the next kill (or the end of the churn)
  final loss        the loss of the last step line in the churn

The PNG is drawn here without matplotlib (the project's virtualenv has none,
and a benchmark plot is not worth a dependency): zlib + a 3x5 pixel font.
"""
import argparse
import json
import os
import re
import statistics
import struct
import sys
import zlib

LINE = re.compile(r"train rank=(\d+) world=(\d+) (.*) t=(\d+\.\d+)\s*$")
NAMES = {"torchrun-default": "torchrun default", "torchrun-tuned": "torchrun tuned",
         "ours": "elastic-agent restart mode", "ours-inplace": "elastic-agent in place",
         "torchft": "TorchFT", "torchft-tuned": "TorchFT tuned", "nvrx": "NVRx", "nvrx-tuned": "NVRx tuned",
         "nvrx-injob": "NVRx in-job"}


def read_log(path):
    steps, starts, discards = [], [], []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if not m:
                    continue
                world, msg, t = int(m.group(2)), m.group(3), float(m.group(4))
                if msg.startswith("step="):
                    kv = dict(x.split("=", 1) for x in msg.split() if "=" in x)
                    steps.append((t, int(kv["step"]), world, float(kv.get("loss", "nan"))))
                elif msg.startswith("start "):
                    kv = dict(x.split("=", 1) for x in msg.split() if "=" in x)
                    starts.append((t, int(kv["step"])))
                elif msg.startswith("discard "):
                    kv = dict(x.split("=", 1) for x in msg.split() if "=" in x)
                    discards.append((t, int(kv["step"]), kv.get("quorum")))
    except OSError:
        pass
    return steps, starts, discards


def analyze_run(run):
    steps, starts, discards = [], [], []
    for p in run["logs"]:
        a, b, c = read_log(p)
        steps += a
        starts += b
        discards += c
    steps.sort()
    starts.sort()
    b0, b1 = run["baseline"]
    c0, c1 = run["churn"]

    def model_step(t):
        s = None
        for x in steps:
            if x[0] > t:
                break
            s = x[1]
        return s

    sb0, sb1 = model_step(b0), model_step(b1)
    base_rate = (sb1 - sb0) / (b1 - b0) if sb0 is not None and sb1 is not None and b1 > b0 else None
    win = [x for x in steps if c0 < x[0] <= c1]
    s_start = model_step(c0)
    s_end = model_step(c1)
    kept = (s_end - s_start) if s_end is not None and s_start is not None else 0
    # kept(t): the running minimum from the end
    curve, lo = [], s_end if s_end is not None else 0
    for x in reversed(win):
        lo = min(lo, x[1])
        curve.append((x[0] - c0, lo - (s_start or 0)))
    curve.reverse()
    # thin the curve to at most ~600 points
    if len(curve) > 600:
        k = len(curve) // 600 + 1
        curve = curve[::k] + curve[-1:]
    # thrown away: at each (re)start whose step is behind the newest step
    # reached, the steps between (a restart from its checkpoint, a state
    # roll-back); TorchFT's steps not committed ("discard")
    # (the step lines, not the "start" lines: a TorchFT joiner logs its start
    # before it heals; ranks are at most one step apart, hence the slack)
    hi, thrown = s_start or 0, 0
    for t, st, w, _ in win:
        if st < hi - 1:
            thrown += hi - (st - 1)
        hi = st if st < hi - 1 else max(hi, st)
    disc = {(s, q) for t, s, q in discards if c0 < t <= c1}
    computed = kept + thrown + len(disc)
    nf = len(run["kills"])
    dur = c1 - c0
    res = {"system": run["system"], "baseline_steps_per_s": round(base_rate, 3) if base_rate else None,
           "churn_s": round(dur, 1), "failures": nf, "kept_steps": kept, "computed_steps": computed,
           "discarded_steps": len(disc)}
    res["kept_steps_per_s"] = round(kept / dur, 3) if dur > 0 else None
    res["goodput"] = round(kept / dur / base_rate, 4) if base_rate and dur > 0 else None
    res["thrown_per_failure"] = round((computed - kept) / nf, 1) if nf else None
    res["s_lost_per_failure"] = round((dur - kept / base_rate) / nf, 2) if nf and base_rate else None
    pauses = []
    ends = run["kills"][1:] + [c1]
    for k, e in zip(run["kills"], ends):
        ts = [k] + [x[0] for x in steps if k < x[0] <= e] + [e]
        pauses.append(round(max(b - a for a, b in zip(ts, ts[1:])), 2))
    res["pause_s"] = pauses
    res["final_loss"] = win[-1][3] if win else None
    # recovered: after every kill, all 4 nodes stepped at world 4 again
    # before the next kill (the last: by the harness's deadline); NVRx, which
    # takes a rejoining node back only at its next in-job restart: training
    # went on at world 3 ("world_back")
    wb = run.get("world_back", 4)
    rec = []
    for i, r in enumerate(run["rejoins"]):
        e = run["kills"][i + 1] if i + 1 < len(run["kills"]) else (run.get("t_recovered") or 0)
        rec.append(any(x[2] >= wb and r < x[0] <= e for x in steps) if e else False)
    res["world_back"] = wb
    res["recovered_each"] = rec
    res["recovered"] = bool(run.get("recovered_end")) and all(rec)
    res["curve"] = [[round(a, 2), b] for a, b in curve]
    res["kill_offsets_s"] = [round(k - c0, 2) for k in run["kills"]]
    return res


# ------------------------------------------------------------------ the PNG
FONT = {  # 3x5, rows top to bottom, 3 bits each (MSB left)
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "%": "101001010100101",
    "-": "000000111000000", ":": "000010000010000", "(": "010100100100010", ")": "010001001001010",
    "/": "001001010100100", " ": "000000000000000", "=": "000111000111000", ",": "000000000010100",
    "a": "000111101111101", "b": "100111101101111", "c": "000111100100111", "d": "001111101101111",
    "e": "000111111100111", "f": "011100110100100", "g": "000111101111001", "h": "100111101101101",
    "i": "010000010010010", "j": "001000001101111", "k": "100101110101101", "l": "100100100100111",
    "m": "000111111101101", "n": "000110101101101", "o": "000111101101111", "p": "000111101111100",
    "q": "000111101111001", "r": "000111100100100", "s": "000111110011111", "t": "010111010010011",
    "u": "000101101101111", "v": "000101101101010", "w": "000101101111111", "x": "000101010101101",
    "y": "000101111001111", "z": "000111010100111",
}
COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
          (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)]


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1, dash=0):
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dash or (n // dash) % 2 == 0:
                for ox in range(width):
                    for oy in range(width):
                        self.dot(x0 + ox - width // 2, y0 + oy - width // 2, c)
            n += 1
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c=(0, 0, 0), scale=2):
        for ch in s.lower():
            g = FONT.get(ch, FONT[" "])
            for r in range(5):
                for col in range(3):
                    if g[r * 3 + col] == "1":
                        for a in range(scale):
                            for b in range(scale):
                                self.dot(x + col * scale + a, y + r * scale + b, c)
            x += 4 * scale

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
        data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
        with open(path, "wb") as f:
            f.write(data)


def nice_step(span, n=6):
    raw = span / n
    for m in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000):
        if m >= raw:
            return m
    return raw


def plot(results, meta, path):
    W, H, L, R, T, B = 1000, 600, 80, 300, 50, 60
    cv = Canvas(W, H)
    runs = [r for r in results if r.get("curve")]
    xmax = max([meta["churn_s"]] + [r["curve"][-1][0] for r in runs]) or 1
    ymax = max([1] + [r["curve"][-1][1] for r in runs] +
               [(r["baseline_steps_per_s"] or 0) * meta["churn_s"] for r in runs])
    px = lambda x: L + (W - L - R) * x / xmax  # noqa: E731
    py = lambda y: H - B - (H - T - B) * y / ymax  # noqa: E731
    grey, black = (210, 210, 210), (0, 0, 0)
    xs, ys = nice_step(xmax), nice_step(ymax)
    v = 0
    while v <= xmax:
        cv.line(px(v), T, px(v), H - B, grey)
        cv.text(int(px(v)) - 8, H - B + 8, f"{v:g}")
        v += xs
    v = 0
    while v <= ymax:
        cv.line(L, py(v), W - R, py(v), grey)
        cv.text(8, int(py(v)) - 5, f"{v:g}")
        v += ys
    cv.line(L, T, L, H - B, black)
    cv.line(L, H - B, W - R, H - B, black)
    for k in (results[0]["kill_offsets_s"] if results else []):  # the same schedule for all
        cv.line(px(k), T, px(k), H - B, (120, 120, 120), dash=4)
    cv.text(L, 12, "kept steps against time under churn (a node sigkilled at each dashed line)", scale=2)
    cv.text(L + 200, H - 24, "seconds into the churn", scale=2)
    ly = T + 10
    for i, r in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        pts = [(0, 0)] + [tuple(p) for p in r["curve"]]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            cv.line(px(x0), py(y0), px(x1), py(y0), c, width=2)  # kept steps hold until the next line
            cv.line(px(x1), py(y0), px(x1), py(y1), c, width=2)
        if r["baseline_steps_per_s"]:  # no failure: the baseline rate, thin dashed
            cv.line(px(0), py(0), px(xmax), py(r["baseline_steps_per_s"] * xmax), c, dash=6)
        cv.line(W - R + 15, ly + 5, W - R + 40, ly + 5, c, width=3)
        gp = f"{r['goodput'] * 100:.1f}%" if r.get("goodput") is not None else "-"
        cv.text(W - R + 48, ly, NAMES.get(r["system"], r["system"]), scale=2)
        cv.text(W - R + 48, ly + 14, f"goodput {gp}", scale=2)
        ly += 40
    cv.text(W - R + 15, ly + 10, "dashed: its no-failure rate", scale=2)
    cv.text(W - R + 15, ly + 30, f"torch {meta.get('torch', '?')[:6]}", scale=2)
    cv.text(W - R + 15, ly + 50, f"load {meta.get('loadavg_start', '?').split()[0]}", scale=2)
    cv.png(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--json", required=True)
    ap.add_argument("--png", default="")
    a = ap.parse_args()
    meta = json.load(open(os.path.join(a.out, "meta.json")))
    runs = [json.loads(x) for x in open(os.path.join(a.out, "runs.jsonl")) if x.strip()]
    results = []
    for r in runs:
        if not r.get("started"):
            results.append({"system": r["system"], "recovered": False, "started": False})
            continue
        results.append(analyze_run(r))
    out = {"bench": "goodput", "meta": meta, "results": results}
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"goodput under churn: torch {meta['torch']}, torchft {meta['torchft']}, nvrx {meta.get('nvrx', 'none')}, "
          f"{meta['cpus']} cpus, 4 nodes on 127.0.0.1")
    print(f"load average at start: {meta['loadavg_start']}   at end: {meta['loadavg_end']}   wall: {meta['wall_s']} s")
    print(f"command: {meta['command']}")
    print(f"churn {meta['churn_s']} s per system: a node SIGKILLed every {meta['interval_s']} s (first at "
          f"{meta['interval_s'] / 2:g} s), back {meta['rejoin_s']} s later, seed {meta['seed']}, {meta['kills']} kills; "
          f"baseline {meta['baseline_s']} s with no failure")
    hdr = (f"{'system':<27} {'goodput':>8} {'kept/s':>7} {'base/s':>7} {'kept':>6} {'computed':>8} "
           f"{'thrown/f':>8} {'s lost/f':>8} {'pauses (s)':>22} {'final loss':>10} {'recovered':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if not r.get("started", True):
            print(f"{NAMES.get(r['system'], r['system']):<27} did not start")
            continue
        gp = f"{r['goodput'] * 100:.1f}%" if r["goodput"] is not None else "-"
        f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
        pauses = "/".join(f"{p:.1f}" for p in r["pause_s"]) or "-"
        print(f"{NAMES.get(r['system'], r['system']):<27} {gp:>8} {f(r['kept_steps_per_s'], '.2f'):>7} "
              f"{f(r['baseline_steps_per_s'], '.2f'):>7} {r['kept_steps']:>6} {r['computed_steps']:>8} "
              f"{f(r['thrown_per_failure'], '.1f'):>8} {f(r['s_lost_per_failure'], '.2f'):>8} {pauses:>22} "
              f"{f(r['final_loss'], '.2e'):>10} {(('yes' if r.get('world_back', 4) == 4 else 'yes at 3') if r['recovered'] else 'NO'):>9}")
    print("goodput = kept steps per second of the churn / the same system's steps per second with no failure; "
          "thrown/f = (computed - kept) per failure; s lost/f = (churn s - kept / baseline rate) per failure; "
          "pauses: the longest gap between steps after each kill")
    if any(r.get("world_back", 4) != 4 for r in results):
        print("recovered: back at world 4 after each kill; 'yes at 3': NVRx (min-healthy) takes a rejoining node "
              "back only at its next in-job restart, so training went on at world 3")
    if a.png:
        plot([r for r in results if r.get("started", True)], meta, a.png)
        print(f"plot: {a.png}")
    return 0 if all(r.get("recovered") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
