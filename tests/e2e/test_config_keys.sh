#!/usr/bin/env bash
# Every job-file key is read by code that acts on it (issue 13, item 11).
#
# The keys come from the table itself, through `elastic-agent config` (the
# dump lists every key once, by its own name; old names and the guide's
# synonyms load into the same fields).  For each key the product's sources
# (agent base membership config rdzv train ckpt; not chaos/ or tests/, which only
# drive or check it) must read its field somewhere outside the loader:
#
#   SECTION.KEY  ->  `.SECTION.KEY` or `->SECTION.KEY` (cfg.train.steps,
#                    a->o->cfg.runtime.max_restarts, …), not on a line that
#                    only assigns it, not in config/keys.c, config/config.c
#                    or ea_config.h;
#   membership.KEY   the section is an ea_swim_config handed to the SWIM
#                    core whole, so `.KEY` / `->KEY` in membership/, outside
#                    the defaults in membership/swim_config.c.
#
# A key that cannot act yet is listed in EXCEPTIONS with the reason; an
# exception whose key has since become consumed fails too, so the list
# cannot go stale.
set -euo pipefail
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"

declare -A EXCEPTIONS=(
  # One choice on purpose: the loader refusing every other strategy by name
  # is the whole behaviour; nothing downstream has anything to choose.
  [distributed.strategy]="single-choice key: validated, nothing to act on"
)

SRC=(agent base membership config rdzv train ckpt)
keys=$("$EA_BIN" config | awk '
  /^[a-z_]+:$/ { sec = substr($0, 1, length($0) - 1); next }
  /^  [a-z_0-9]+: / { k = $1; sub(/:$/, "", k); print sec "." k }')
n=$(wc -l <<<"$keys")
[ "$n" -ge 50 ] || fail "read only $n keys from 'elastic-agent config'"

# consumers SECTION KEY — the lines that read the field, one per line.
consumers() {
  local sec=$1 key=$2 pat files
  if [ "$sec" = membership ]; then
    pat="(\\.|->)$key"
    files=$(git ls-files 'membership/*.c' 'membership/*.h' | grep -v '^membership/swim_config\.c$')
  else
    pat="(\\.|->)$sec\\.$key"
    files=$(git ls-files "${SRC[@]/%//*.c}" "${SRC[@]/%//*.h}" | grep -vE '^config/(keys|config)\.c$')
  fi
  # An occurrence that is not the target of a plain assignment (x.k = …,
  # x.k[i] = …), on a line that is not a comment (a comment's inner line
  # starts with "* ", a statement may start with "*p = …").
  # shellcheck disable=SC2086
  grep -nP "$pat\\b(?!\\s*(\\[[^]]*\\])?\\s*=[^=])" $files /dev/null |
    grep -vE "^[^:]+:[0-9]+:\s*(\*(\s|/|$)|//|/\*)" || true
}

unused=() stale=()
for k in $keys; do
  sec=${k%%.*} key=${k#*.}
  c=$(consumers "$sec" "$key")
  if [ -n "${EXCEPTIONS[$k]:-}" ]; then
    if [ -n "$c" ]; then stale+=("$k ($(head -n1 <<<"$c"))"); fi
    echo "exception: $k — ${EXCEPTIONS[$k]}"
  elif [ -z "$c" ]; then
    unused+=("$k")
  fi
done
for k in "${!EXCEPTIONS[@]}"; do
  grep -qx "$k" <<<"$keys" || stale+=("$k (no longer a key)")
done
[ ${#unused[@]} -eq 0 ] ||
  fail "keys declared in config/keys.c that no code outside the loader reads: ${unused[*]} (make them act, remove them, or add a documented exception here)"
[ ${#stale[@]} -eq 0 ] || fail "stale exceptions, remove them from EXCEPTIONS: ${stale[*]}"
pass "$n keys, each read outside the loader (${#EXCEPTIONS[@]} documented exceptions)"

# The check itself finds an unread field: a key with no consumer, named
# like a real one, is reported.
[ -z "$(consumers train no_such_key_anywhere)" ] || fail "the scan matched a key nobody reads"
[ -n "$(consumers train steps)" ] || fail "the scan misses train.steps, which rdzv and the trainer read"
[ -n "$(consumers membership probe_interval_ms)" ] || fail "the scan misses membership.probe_interval_ms"
pass "the scan tells a read key from an unread one"
exit 0
