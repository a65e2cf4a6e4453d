#!/usr/bin/env bash
# Checkpoint write throughput: bench/ckpt.c (ea_ckpt_write_shard against a
# pwrite+fsync baseline, same run, same data), then fio doing the same
# sequential O_DIRECT write with io_uring as an external reference for what
# the device can do.
#
#   bench/ckpt.sh [DIR] [MiB]        defaults: build/bench-ckpt, 1024
#   SWEEP=1 bench/ckpt.sh ...         add the chunk × queue-depth sweep
#
# Needs a quiet machine: other I/O on the same disk makes every number here
# meaningless.  DIR must be on the file system checkpoints will use.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-build/bench-ckpt}
MIB=${2:-1024}
REPEATS=${REPEATS:-3}
make --no-print-directory -j2 build/bench/ckpt >/dev/null
mkdir -p "$DIR"
args=(-d "$DIR" -s "$MIB" -r "$REPEATS")
[ "${SWEEP:-0}" = 1 ] && args+=(--sweep)
build/bench/ckpt "${args[@]}"

if command -v fio >/dev/null 2>&1; then
  echo
  echo "reference: fio, sequential write, 2 MiB blocks, io_uring, iodepth 4, O_DIRECT, fsync at end"
  fio --name=ckpt-ref --filename="$DIR/fio.bin" --rw=write --bs=2M --iodepth=4 \
      --ioengine=io_uring --direct=1 --size="${MIB}M" --end_fsync=1 --numjobs=1 \
      --output-format=terse --terse-version=3 2>/dev/null |
    awk -F';' '{ printf "fio write: %.0f MiB/s (%s KiB in %s ms)\n", $48/1024, $47, $50/1 }'
  rm -f "$DIR/fio.bin"
else
  echo "fio not installed: no external reference (apt-get install fio)"
fi
