#!/usr/bin/env bash
# The source tree keeps its house rules (scripts/check-layout.sh): no private
# header of another module, no '../' includes, dependencies only downwards.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/check-layout.sh
