# shellcheck shell=bash
# tests/e2e/gray_lib.sh — helpers of the three-node gray-link scripts
# (test_gray_library.sh, test_gray_restart.sh); source it after lib.sh, don't
# run it.  The caller defines js NAME EXPR (a Python expression on the status
# document d).

# gray_net PREFIX N — netns_bridge PREFIX N, and in each namespace an nft
# table `gray` with an input chain that accepts by default (the fault adds a
# drop rule to the receiver's input: docs TESTING.md); skipped (77) when nft
# does not work in a namespace.
gray_net() {
  local s
  netns_bridge "$1" "$2"
  for s in $(seq "$2"); do
    ip netns exec "$(ns_of "$s")" nft -f - <<'EOF' || { echo "skip: nft does not work in a namespace"; exit 77; }
add table inet gray
add chain inet gray input { type filter hook input priority 0 ; policy accept ; }
EOF
  done
}

# with_id NAME BYTE — NAME's node id is BYTE × 16 (the lowest id controls).
with_id() {
  mkdir -p "$EA_TMP/$1/data"
  printf '%s\n' "$(printf "$2%.0s" $(seq 16))" >"$EA_TMP/$1/data/node-id"
}

# gray_held CTRL NODE COOL NODES — CTRL's status holds NODE out for the link
# probe's word (why "link", the first hold, not waived, at most COOL s
# left), the generation is NODES (comma-separated, rank order), one verdict
# acted on; the text status says so too.
gray_held() {
  "$PY" - "$(ea_status "$1" --json)" "$2" "$3" "$4" <<'EOF' || fail "held_out: $(js "$1" 'd["held_out"]')"
import json, sys
d, node, cool, nodes = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4].split(",")
h = d["held_out"]
assert len(h) == 1, h
h = h[0]
assert h["node"] == node and h["why"] == "link" and h["holds"] == 1 and not h["waived"], h
assert h["reason"].startswith("link probe: "), h
assert 0 < h["remaining_s"] <= cool, h
assert d["generation"]["nodes"] == nodes, d["generation"]
assert d["counters"]["rdzv"]["link_downs"] == 1, d["counters"]["rdzv"]
EOF
  ea_status "$1" | grep -q "^ *held out: $2 (link: link probe: " || fail "text status: $(ea_status "$1" | grep 'held out')"
}

# gray_heal CTRL SLOT WORLD T_FAULT DROP_S COOL — until CTRL holds nobody
# out: flush slot SLOT's input chain DROP_S s after T_FAULT, and fail if
# the world is back at WORLD while the hold lasts, or the hold outlasts
# DROP_S + COOL s.  Sets healed (epoch ms of the flush; fails if the hold
# ended before it).
gray_heal() {
  local hw
  healed=0
  while :; do
    hw=$(js "$1" '"%s %d" % (",".join(h["node"] for h in d["held_out"]) or "-", d["generation"]["world"])')
    [ "${hw%% *}" = - ] && break
    (($(now_ms) - $4 < ($6 + $5) * 1000)) || fail "still held out: $(js "$1" 'd["held_out"]')"
    if [ "$healed" = 0 ] && (($(now_ms) >= $4 + $5 * 1000)); then
      ip netns exec "$(ns_of "$2")" nft flush chain inet gray input || fail "nft flush"
      healed=$(now_ms)
      say "healed after $(((healed - $4) / 1000)) s"
    fi
    [ "${hw##* }" = "$3" ] && fail "taken back while held out ($hw)"
    sleep 0.2
  done
  [ "$healed" != 0 ] || fail "the hold ended before the heal (cooldown $6 s too short for a $5 s fault)"
}
