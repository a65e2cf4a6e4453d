#!/usr/bin/env bash
# Build and run every libFuzzer harness tests/fuzz/fuzz_*.c for SECONDS each.
#
#   scripts/fuzz.sh [SECONDS]        (make fuzz; default 30)
#   FUZZ_ONLY=wire scripts/fuzz.sh 60   only harnesses whose name contains "wire"
#
# Each harness is built with clang -fsanitize=fuzzer,address,undefined and
# linked with every library source (the modules the Makefile names; objects
# are cached in build-fuzz/obj and rebuilt when a source or header changes),
# into build-fuzz/.  The seeds
# in tests/fuzz/corpus/<name>/ are copied into build-fuzz/corpus-<name>, which
# also keeps what earlier runs found.  A crash, sanitizer report or failed
# check leaves build-fuzz/<name>-crash-* and makes this script exit non-zero;
# replay one with build-fuzz/fuzz_<name> build-fuzz/<name>-crash-….
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
OUT=build-fuzz
CLANG=${CLANG:-clang}
PKGS="libuv msgpack yaml-0.1 libxxhash liburing libsodium openblas jansson libmicrohttpd libcurl"
MODULES=$(sed -n 's/^MODULES *:= *//p' Makefile)
# A module's wings (agent/ckpt/, …) are its sources too, each with an -I path.
WINGS=$(for m in $MODULES; do for w in "$m"/*/; do [ -d "$w" ] && echo "${w%/}"; done; done)

command -v "$CLANG" >/dev/null || { echo "fuzz: $CLANG not found" >&2; exit 1; }
PKG_CFLAGS=$(pkg-config --cflags $PKGS 2>/dev/null)
PKG_LIBS=$(pkg-config --libs $PKGS 2>/dev/null)
VERSION=$(cat VERSION 2>/dev/null || echo 0.1.0)
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CFLAGS="-O1 -g -fno-omit-frame-pointer -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers \
  -D_GNU_SOURCE -DEA_VERSION=\"$VERSION\" -Iinclude $PKG_CFLAGS $(for m in $MODULES $WINGS; do printf -- '-I%s ' "$m"; done)"

all_lib_sources() {
  for m in $MODULES $WINGS; do ls "$m"/*.c; done 2>/dev/null | grep -v -e '^agent/cli/main\.c$' -e '_nccl\.c$'
}

mkdir -p "$OUT/obj"
status=0
summary=()
shopt -s nullglob
for h in tests/fuzz/fuzz_*.c; do
  name=$(basename "$h" .c); name=${name#fuzz_}
  [ -n "${FUZZ_ONLY:-}" ] && [[ $name != *"$FUZZ_ONLY"* ]] && continue
  srcs=$(all_lib_sources)

  objs=()
  for s in $srcs; do
    o=$OUT/obj/${s%.c}.o
    mkdir -p "$(dirname "$o")"
    if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find include $MODULES -name '*.h' -newer "$o" 2>/dev/null | head -n1)" ]; then
      $CLANG $CFLAGS $SAN -fsanitize=fuzzer-no-link -c "$s" -o "$o" || { echo "fuzz: cannot compile $s" >&2; exit 1; }
    fi
    objs+=("$o")
  done
  bin=$OUT/fuzz_$name
  $CLANG $CFLAGS $SAN -fsanitize=fuzzer "$h" "${objs[@]}" -o "$bin" $PKG_LIBS -lm -lpthread ||
    { echo "fuzz: cannot build $h" >&2; exit 1; }

  corpus=$OUT/corpus-$name
  mkdir -p "$corpus"
  [ -d "tests/fuzz/corpus/$name" ] && cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null
  log=$OUT/fuzz-$name.log
  echo "fuzz: $name for ${SECONDS_EACH}s (corpus $corpus, log $log)"
  # max_len: a push-pull frame with a few dozen members, well above any UDP packet
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$bin" -max_total_time="$SECONDS_EACH" -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$OUT/$name-" "$corpus" >"$log" 2>&1
  rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n1)
  execs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec:[[:space:]]*//p' "$log")
  cov=$(sed -E -n 's/.*cov: ([0-9]+).*/\1/p' <<<"$done_line")
  ft=$(sed -E -n 's/.*ft: ([0-9]+).*/\1/p' <<<"$done_line")
  corp=$(sed -E -n 's/.*corp: ([0-9]+\/[0-9a-zA-Z]+).*/\1/p' <<<"$done_line")
  if [ $rc -ne 0 ]; then
    status=1
    summary+=("FAIL $name (rc=$rc): see $log and $OUT/$name-crash-*")
    grep -E 'ERROR|SUMMARY|check failed|runtime error' "$log" | head -n 10 >&2
  else
    summary+=("ok   $name: ${execs:-?} runs, ${rate:-?} exec/s, cov ${cov:-?} edges, ft ${ft:-?}, corpus ${corp:-?}")
  fi
done
[ ${#summary[@]} -eq 0 ] && { echo "fuzz: no harness in tests/fuzz"; exit 0; }
printf '%s\n' "${summary[@]}"
exit $status
