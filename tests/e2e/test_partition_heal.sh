#!/usr/bin/env bash
# End-to-end: a partition longer than dead_reclaim_ms heals by itself —
# tests/e2e/partition_long.sh (read it for what is asserted) with short
# timings: a 12 s partition, membership.dead_reclaim_ms 4 s,
# reconnect_interval_ms 3 s.  The 5-minute version with the default
# timings: `bash tests/e2e/partition_long.sh` (not in make check).
export PART_S=${PART_S:-12} RECLAIM_MS=${RECLAIM_MS:-4000} RECON_MS=${RECON_MS:-3000}
exec bash "$(dirname "$0")/partition_long.sh"
