#!/usr/bin/env bash
# Run every benchmark in turn (`make bench`).  Each prints its own table with
# ratios against a baseline measured in the same run; see bench/README.md.
# BENCH="gossip allreduce" limits the set; BENCH_ARGS is passed to each.
set -u
cd "$(dirname "$0")/.."
EA_DEPS_EXTRA="fio" scripts/deps.sh || exit 1
want=${BENCH:-gossip allreduce ckpt recovery recovery_pytorch}
rc=0
for b in $want; do
  echo "=== bench/$b ==="
  if [ -x "bench/$b.sh" ]; then
    bash "bench/$b.sh" ${BENCH_ARGS:-} || rc=1
  elif [ -x "build/bench/$b" ]; then
    "build/bench/$b" ${BENCH_ARGS:-} || rc=1
  else
    echo "bench/$b: not built"; rc=1
  fi
done
exit $rc
