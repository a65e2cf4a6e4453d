#!/usr/bin/env bash
# End-to-end: the page every agent serves at / (issue 31), looked at by a
# real browser (Debian's chromium, headless, started by this test).
#
#  1. a 3-agent training cluster on 127.0.0.1 (the built-in trainer, the
#     default job), one member named '<i>n2<script>';
#  2. /api/v1/status and /api/v1/history against their documented shape
#     (docs/operations.md, "The page"): the status document has the keys
#     `status --json` has, the history's points and generations have their
#     fields and types, and the history fills with a point a second;
#  3. chromium loads n1's page: it refreshed from the JSON, the members
#     table lists the three, the loss and steps/s charts have points, the
#     hostile name is in the table as text (no element made of it), and the
#     browser's network log shows no request of the page's outside the
#     agent (its own background services are not the page's);
#  4. n3 is killed (SIGKILL, agent and worker): n1 and n2 re-form at world
#     2 and the page's generation count grows, its newest generation saying
#     "lost n3";
#  5. a screenshot of the page is written, non-empty, a PNG of the window's
#     size whose top band has the page's header colour and whose loss chart
#     line is drawn (so not an error page).  EA_PAGE_SCREENSHOT=docs/page.png
#     copies it there (the README's picture).
# Skipped (77) only when chromium is not installed and cannot be.
source "$(dirname "$0")/lib.sh"
t_start=$(now_ms)

need_curl
ensure_cmd chromium chromium || {
  echo "skip: Debian's chromium is not installed and cannot be (apt-get install chromium)"
  exit 77
}

HOSTILE='<i>n2<script>'
JOB=(--set train.steps=1000000000 --set compute.min_nodes=2 --set distributed.scale_up_delay_ms=300
  --set experiment.name=page-e2e --set observability.metrics_listen=127.0.0.1:0
  --set checkpoint.dir="$EA_TMP/ckpt" --set checkpoint.save_interval_steps=200)

js() {
  ea_status "$1" --json 2>/dev/null |
    "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2" 2>/dev/null
}
trains() {
  [ "$(js "$1" '"%s %d" % (d["generation"]["phase"], d["generation"]["world"])')" = "running $2" ]
}
http_code() { curl -s -m 5 -o /dev/null -w '%{http_code}' "$PAGE${1#/}"; }
code_is() { [ "$(http_code "$1")" = "$2" ]; }
# hist_wait TIMEOUT_S EXPR — poll n1's /api/v1/history (d) every 250 ms in one
# Python process (a curl and an interpreter every 50 ms would take the CPU
# the agents need on a 2-core machine) until EXPR holds; 1 at the deadline,
# with the last document's counts and point times on stdout.
hist_wait() {
  "$PY" - "${PAGE}api/v1/history" "$1" "$2" <<'EOF'
import json, sys, time, urllib.request
url, timeout, expr = sys.argv[1], float(sys.argv[2]), sys.argv[3]
deadline, d = time.monotonic() + timeout, None
while True:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            d = json.load(r)
        if eval(expr):
            sys.exit(0)
    except Exception:
        pass
    if time.monotonic() >= deadline:
        if d:
            print("points_total", d["points_total"], "generations_total", d["generations_total"],
                  "now", d["now"], "t", [p["t"] for p in d["points"]][-12:])
        sys.exit(1)
    time.sleep(0.25)
EOF
}
# chrome OUT_PREFIX [flags…] — chromium on n1's page with a network log,
# 6 s of the page's virtual time (three refreshes), a 60 s deadline.
CHROME_FLAGS=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
  --disable-background-networking --disable-component-update --disable-sync --disable-default-apps
  --virtual-time-budget=6000)
chrome() {
  local out=$1
  shift
  timeout 60 chromium "${CHROME_FLAGS[@]}" --user-data-dir="$EA_TMP/chrome-$out" \
    --log-net-log="$EA_TMP/$out.netlog.json" "$@" "$PAGE" 2>"$EA_TMP/$out.chrome.log"
}
# facts FILE — what the dumped page shows, as one JSON object (Python's
# html.parser on the DOM as chromium serialized it).
facts() {
  "$PY" - "$1" <<'EOF'
import json, sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.f = {"body": {}, "charts": {}, "member_rows": [], "gen_rows": [], "elements": {},
                  "title": ""}
        self.chart = self.table = self.section = self.row = self.cell = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.f["elements"][tag] = self.f["elements"].get(tag, 0) + 1
        if tag == "body":
            self.f["body"] = {k[5:]: v for k, v in a.items() if k.startswith("data-")}
        if tag == "svg" and (a.get("id") or "").startswith("chart-"):
            self.chart = a["id"]
            self.f["charts"][self.chart] = {"points": int(a.get("data-points") or 0), "lines": 0}
        if tag == "polyline" and self.chart:
            self.f["charts"][self.chart]["lines"] += 1
        if tag == "table":
            self.table = a.get("id")
        if tag == "tbody":
            self.section = "body"
        if tag == "tr" and self.section == "body":
            self.row = []
        if tag == "td" and self.row is not None:
            self.cell = ""
        if tag == "title":
            self.cell = ""
    def handle_endtag(self, tag):
        if tag == "svg":
            self.chart = None
        if tag == "td" and self.row is not None and self.cell is not None:
            self.row.append(self.cell)
            self.cell = None
        if tag == "tr" and self.row is not None:
            key = {"members": "member_rows", "gens": "gen_rows"}.get(self.table)
            if key:
                self.f[key].append(self.row)
            self.row = None
        if tag == "tbody":
            self.section = None
        if tag == "table":
            self.table = None
        if tag == "title":
            self.f["title"], self.cell = self.cell, None
    def handle_data(self, d):
        if self.cell is not None:
            self.cell += d
p = P()
p.feed(open(sys.argv[1]).read())
print(json.dumps(p.f))
EOF
}
# fact FILE EXPR — one value of the facts (f).
fact() { facts "$1" | "$PY" -c 'import json,sys; f=json.load(sys.stdin); print(eval(sys.argv[1]))' "$2"; }

say "1. three agents train (one named $HOSTILE)"
start_agent n1 "${JOB[@]}"
seed=${AGENT_ADDR[n1]}
# The hostile name is not a path: its own data dir, started like start_agent does.
mkdir -p "$EA_TMP/h"
setsid "$EA_BIN" run --name "$HOSTILE" --bind 127.0.0.1:0 --data-dir "$EA_TMP/h/data" \
  --join "$seed" "${JOB[@]}" --set observability.metrics_listen= >"$EA_TMP/h/log" 2>&1 </dev/null &
EA_PGIDS+=($!)
# shellcheck disable=SC2034 # lib.sh reads them (ea_status h, stop_agent h)
AGENT_PID["h"]=$! AGENT_DIR["h"]=$EA_TMP/h
start_agent n3 --join "$seed" "${JOB[@]}"
for n in n1 h n3; do
  wait_for 40 trains "$n" 3 || fail "$n does not train at world 3: $(ea_status "$n")"
done
PAGE="http://$(metrics_addr n1)/"
[ "$PAGE" != "http:///" ] || fail "n1 logged no metrics address: $(grep listen "$(agent_log n1)")"
grep -q "page=$PAGE " "$(agent_log n1)" || fail "n1's listen line does not name the page"
pass "world 3, page at $PAGE ($(($(now_ms) - t_start)) ms)"

say "2. the JSON endpoints against their documented shape"
# The first request starts the loop formatting them: 503 until its next publish.
wait_for 5 code_is /api/v1/status 200 || fail "/api/v1/status: $(http_code /api/v1/status)"
wait_for 5 code_is /api/v1/history 200 || fail "/api/v1/history: $(http_code /api/v1/history)"
out=$(hist_wait 30 'len([p for p in d["points"] if p["loss"] is not None]) >= 5') ||
  fail "history has no 5 points with a loss in 30 s: $out"
curl -s -m 5 -D "$EA_TMP/status.head" -o "$EA_TMP/status.json" "${PAGE}api/v1/status"
curl -s -m 5 -o "$EA_TMP/history.json" "${PAGE}api/v1/history"
ea_status n1 --json >"$EA_TMP/cli.json" || fail "status --json"
grep -qi '^content-type: application/json' "$EA_TMP/status.head" || fail "status type: $(cat "$EA_TMP/status.head")"
out=$("$PY" - "$EA_TMP/status.json" "$EA_TMP/cli.json" "$EA_TMP/history.json" "$HOSTILE" <<'EOF'
import json, sys
api, cli, hist = (json.load(open(p)) for p in sys.argv[1:4])
hostile = sys.argv[4]
def need(c, what):
    if not c:
        print("FAIL", what); sys.exit(1)
# /api/v1/status is the `status --json` document: the same sections, members, self
need(list(api) == list(cli), "status sections %s != %s" % (list(api), list(cli)))
need(set(api["self"]) == set(cli["self"]), "self keys")
need(api["self"]["name"] == "n1", "self.name")
names = sorted(m["name"] for m in api["members"])
need(names == sorted(["n1", "n3", hostile]), "members %s" % names)
for m in api["members"]:
    for k, t in (("name", str), ("id", str), ("gossip", str), ("role", str), ("state", str),
                 ("since_s", float), ("self", bool)):
        need(isinstance(m[k], t), "member %s %r" % (k, m[k]))
g = api["generation"]
need(g["world"] == 3 and isinstance(g["last_step"], int) and isinstance(g["steps_per_s"], float),
     "generation %r" % g)
for sec, keys in (("job", ("protocol", "state", "restarts", "outcome", "exit_code")),
                  ("checkpoint", ("latest", "keep_last", "last_error", "committed")),
                  ("alerts", ("firing", "recent")), ("controller", ("name", "id"))):
    for k in keys:
        need(k in api[sec], "%s.%s" % (sec, k))
need(api["job"]["protocol"] == "builtin", "job.protocol")
# /api/v1/history
need(hist["version"] == 1 and hist["node"] == "n1" and hist["period_ms"] == 1000, "history head")
need(hist["capacity"] == {"points": 600, "generations": 64}, "capacity")
need(isinstance(hist["now"], float) and hist["points_total"] >= len(hist["points"]) >= 5, "counts")
P = {"t": float, "step": int, "steps_per_s": (float, type(None)), "loss": (float, type(None)),
     "gen": int, "world": int}
for p in hist["points"]:
    need(set(p) == set(P) and all(isinstance(p[k], t) for k, t in P.items()), "point %r" % p)
ts = [p["t"] for p in hist["points"]]
# one point per second of the agent's clock, taken on its 500 ms tick: 0.5 to 1.5 s apart
need(all(0.25 < b - a < 2.5 for a, b in zip(ts, ts[1:])), "points a second apart: %r" % ts[:10])
need(hist["points"][-1]["world"] == 3, "newest point's world")
G = {"gen": int, "id": str, "t": float, "world": int, "nodes": int, "formation_ms": int,
     "stalled_ms": int, "step": int, "kind": str, "why": str}
need(hist["generations_total"] >= 1 and hist["generations"], "generations")
for x in hist["generations"]:
    need(set(x) == set(G) and all(isinstance(x[k], t) for k, t in G.items()), "gen %r" % x)
    need(x["kind"] in ("start", "lost", "held_out", "left", "drained", "join", "failure",
                       "reform"), "kind %r" % x["kind"])
need(hist["generations"][-1]["world"] == 3, "newest generation's world")
c = hist["checkpoint"]
need(c is None or (set(c) == {"step", "gen", "t", "bytes"} and isinstance(c["step"], int)), "ckpt")
print("ok", len(hist["points"]), "points", hist["generations_total"], "generations")
EOF
) || fail "JSON shape: $out"
pass "status document as status --json; history: $out"

say "3. chromium loads n1's page"
chrome one --dump-dom >"$EA_TMP/one.html" || fail "chromium failed: $(tail -n 5 "$EA_TMP/one.chrome.log")"
dom=$EA_TMP/one.html
assert_eq "$(fact "$dom" 'f["body"].get("state")')" ok "the page's state (refreshed from its JSON)"
assert_eq "$(fact "$dom" 'f["body"].get("members")')" 3 "members the page lists"
assert_eq "$(fact "$dom" 'len(f["member_rows"])')" 3 "rows of the members table"
names=$(fact "$dom" '" ".join(sorted(r[0].replace("this node", "") for r in f["member_rows"]))')
assert_eq "$names" "$HOSTILE n1 n3" "names in the members table (as text)"
lp=$(fact "$dom" 'f["charts"]["chart-loss"]["points"]')
rp=$(fact "$dom" 'f["charts"]["chart-rate"]["points"]')
((${lp:-0} >= 5 && ${rp:-0} >= 5)) || fail "charts have too few points: loss ${lp:-?} steps/s ${rp:-?}"
assert_eq "$(fact "$dom" 'f["charts"]["chart-loss"]["lines"] * f["charts"]["chart-rate"]["lines"]')" 1 \
  "a line drawn in each chart"
G1=$(fact "$dom" 'f["body"].get("generations")')
((${G1:-0} >= 1)) || fail "the page shows no generation: $G1"
# The hostile name: text in a cell, and no element made of it (the page
# itself has one script and no <i>); the title is the page's.
assert_eq "$(fact "$dom" '(f["elements"].get("script", 0), f["elements"].get("i", 0))')" "(1, 0)" \
  "script and i elements on the page"
assert_eq "$(fact "$dom" 'f["title"]')" elastic-agent "the page's title"
# The page's requests (the document, and what it fetched), from chromium's
# network log: a request of the page is one it initiated or one in its
# network partition (the site 127.0.0.1); chromium's own background
# services are neither.
net=$("$PY" - "$EA_TMP/one.netlog.json" "$PAGE" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
try:
    d = json.loads(text)
except ValueError:  # a log cut at exit: close it
    d = json.loads(text.rstrip().rstrip(",") + "]}")
page = sys.argv[2]
origin = page.rstrip("/")
types = {v: k for k, v in d["constants"]["logEventTypes"].items()}
mine, outside = set(), set()
for e in d["events"]:
    if types.get(e["type"]) != "URL_REQUEST_START_JOB":
        continue
    p = e.get("params", {})
    url = p.get("url", "")
    ours = (p.get("initiator") == origin or "http://127.0.0.1" in p.get("network_isolation_key", "")
            or url.startswith(origin + "/"))
    if not ours:
        continue
    (mine if url.startswith(origin + "/") else outside).add(url)
if outside:
    print("FAIL requests outside the agent:", sorted(outside)); sys.exit(1)
need = {page, page + "api/v1/status", page + "api/v1/history"}
if not need <= mine:
    print("FAIL missing requests:", sorted(need - mine), "saw", sorted(mine)); sys.exit(1)
print(len(mine), "distinct URLs, all on", origin)
EOF
) || fail "network: $net"
pass "3 members, charts with $lp and $rp points, $G1 generation(s), the hostile name as text; $net"

say "4. kill n3: the page's generation count grows"
stop_agent n3 KILL
wait_for 40 trains n1 2 || fail "n1 does not re-form at world 2: $(ea_status n1)"
out=$(hist_wait 10 "d['generations_total'] > $G1") || fail "history has no new generation: $out"
chrome two --dump-dom >"$EA_TMP/two.html" || fail "chromium failed: $(tail -n 5 "$EA_TMP/two.chrome.log")"
dom=$EA_TMP/two.html
G2=$(fact "$dom" 'f["body"].get("generations")')
((${G2:-0} > G1)) || fail "the page's generation count did not grow: $G1 -> $G2"
assert_eq "$(fact "$dom" 'len(f["member_rows"])')" 3 "members listed after the kill (n3 dead or suspect)"
newest=$(fact "$dom" 'f["gen_rows"][0]')
grep -q "'lost n3'" <<<"$newest" || fail "the newest generation does not say 'lost n3': $newest"
pass "generations $G1 -> $G2, the newest: lost n3"

say "5. a screenshot"
chrome shot --screenshot="$EA_TMP/page.png" --window-size=1280,1000 ||
  fail "chromium failed: $(tail -n 5 "$EA_TMP/shot.chrome.log")"
shot=$("$PY" - "$EA_TMP/page.png" <<'EOF'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    print("FAIL not a PNG"); sys.exit(1)
pos, idat, w = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
if (w, h, depth) != (1280, 1000, 8) or ctype not in (2, 6):
    print("FAIL size or type", w, h, depth, ctype); sys.exit(1)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
rows, prev = [], bytearray(stride)
for y in range(h):  # undo the PNG row filters
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
px = lambda x, y: tuple(rows[y][x * bpp:x * bpp + 3])
band = sum(px(x, 5) == (0x1d, 0x35, 0x57) for x in range(w))
loss = sum(px(x, y) == (0xe7, 0x6f, 0x51) for y in range(0, h, 2) for x in range(0, w, 2))
if band < w // 2 or loss < 20:
    print("FAIL not the page: header band %d px, loss line %d px" % (band, loss)); sys.exit(1)
print("%d bytes, %dx%d, header band %d px, loss line %d px" % (len(data), w, h, band, loss))
EOF
) || fail "screenshot: $shot"
if [ -n "${EA_PAGE_SCREENSHOT:-}" ]; then
  cp "$EA_TMP/page.png" "$EA_PAGE_SCREENSHOT" || fail "cannot copy the screenshot to $EA_PAGE_SCREENSHOT"
  say "screenshot copied to $EA_PAGE_SCREENSHOT"
fi
pass "screenshot: $shot"
pass "the page ($(($(now_ms) - t_start)) ms)"
