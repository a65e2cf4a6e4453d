#!/usr/bin/env bash
# What a checkpoint costs, against baselines measured in the same run on the
# same file system (bench/ckpt.c says exactly what each column is):
#   1. persist throughput of the whole checkpoint path (hash + io_uring
#      O_DIRECT write + fsync + MANIFEST/LATEST commit), 1 and 4 shards,
#      vs fio (--direct=1 --bs=1M --end_fsync=1) and plain pwrite + fsync;
#   2. read-back with every byte hashed (verify; verify + read as a resume
#      does) vs fio sequential read of the same file;
#   3. training steps per second while a checkpoint is persisted vs without;
#   4. the training stall per checkpoint (the staging copy) vs a synchronous
#      save of the same state.
#
#   bench/ckpt.sh [--quick] [--dir DIR] [--sizes MiB,MiB,...] [--repeats N] [--sweep]
#                 [--tables 1,2,3,4]   (only those; 1 and 2 come from one pass)
#
# Defaults: DIR build/bench-ckpt (it must be on the file system checkpoints
# will use), sizes 256,1024,2048,4096 MiB, 5 repeats; --quick: 256 and 1024
# MiB, 3 repeats (a few minutes on a 2-core VM).  Needs fio (apt-get install
# fio; without it the fio columns print "-").  The numbers only mean
# something on a quiet machine: the load average is printed with each table.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=build/bench-ckpt
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) args+=(--quick) ;;
    --dir) DIR=$2; shift ;;
    --sizes) args+=(-s "$2"); shift ;;
    --repeats) args+=(-r "$2"); shift ;;
    --sweep) args+=(--sweep) ;;
    --tables) args+=(--tables "$2"); shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "bench/ckpt.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
command -v fio >/dev/null 2>&1 || { echo "fio not installed: no fio columns"; args+=(--no-fio); }
make --no-print-directory -j2 build/bench/ckpt >/dev/null
mkdir -p "$DIR"
fs=$(findmnt -n -o FSTYPE --target "$DIR" 2>/dev/null || echo "?")
dev=$(findmnt -n -o SOURCE --target "$DIR" 2>/dev/null || echo "?")
echo "machine: $(nproc) cores, $(uname -r), $DIR on $fs ($dev), fio $(fio --version 2>/dev/null || echo none)"
start=$(date +%s)
build/bench/ckpt -d "$DIR" "${args[@]}"
echo "wall: $(($(date +%s) - start)) s"
