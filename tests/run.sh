#!/usr/bin/env bash
# Run every test: each Check suite in $BUILD/tests, then each end-to-end script
# in tests/e2e (exit 0 = pass, 77 = skipped, anything else = fail).  Prints one
# summary line at the end: "N passed, N failed, N skipped".
#
#   tests/run.sh                 everything
#   tests/run.sh swim config     only suites/scripts whose name contains a word
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export EA_BINDIR=${EA_BINDIR:-bin}
export EA_BIN=${EA_BIN:-$EA_BINDIR/elastic-agent}
logdir=$BUILD/test-logs
mkdir -p "$logdir"
passed=0 failed=0 skipped=0
failures=()

want() {
  [ $# -eq 0 ] && return 0
  local n=$1; shift
  for w in "${FILTER[@]}"; do [[ $n == *"$w"* ]] && return 0; done
  return 1
}
FILTER=("$@")

for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  [ ${#FILTER[@]} -eq 0 ] || want "$name" || continue
  log=$logdir/$name.log
  start=$(date +%s.%N)
  # Check forks each test; a suite that dies outright still counts as a failure.
  CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120} timeout 900 "$t" >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -n1)
  if [ -n "$line" ]; then
    n=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    bad=$((f + e))
    passed=$((passed + n - bad)); failed=$((failed + bad))
    if [ "$bad" -gt 0 ] || [ $rc -ne 0 ]; then
      [ "$bad" -eq 0 ] && failed=$((failed + 1))
      failures+=("$name"); echo "FAIL $name ($line, rc=$rc, ${secs}s)"; grep -E ':[EF]:' "$log" | head -20
    else
      echo "ok   $name ($n checks, ${secs}s)"
    fi
  else
    failed=$((failed + 1)); failures+=("$name")
    echo "FAIL $name (no Check summary, rc=$rc, ${secs}s)"; tail -n 20 "$log"
  fi
done

for s in tests/e2e/test_*.sh; do
  [ -f "$s" ] || continue
  name=$(basename "$s" .sh)
  [ ${#FILTER[@]} -eq 0 ] || want "$name" || continue
  log=$logdir/$name.log
  start=$(date +%s.%N)
  timeout 600 bash "$s" >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); echo "ok   $name (${secs}s)"
  elif [ $rc -eq 77 ]; then
    skipped=$((skipped + 1)); echo "skip $name: $(grep -m1 -i 'skip' "$log")"
  else
    failed=$((failed + 1)); failures+=("$name")
    echo "FAIL $name (rc=$rc, ${secs}s)"
    # What the test said failed comes first: the agents' log tails after it
    # can push it out of a CI log's window.
    grep -E '^(FAIL|ok):|Traceback|Error' "$log" | tail -n 8 | sed 's/^/  said: /'
    echo "last lines of $log:"; tail -n 30 "$log"
  fi
done

[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
