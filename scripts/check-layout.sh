#!/usr/bin/env bash
# The house rules of the source tree, checked from the #include lines
# (docs/layout.md explains them):
#   * a module's private headers (MODULE/*.h) are included only by that
#     module's own .c files (and by tests/ and bench/, which test internals);
#   * a module includes the public headers (include/*.h) only of the modules
#     it may depend on: base ← membership ← rdzv ← agent, base ← ckpt ← train;
#   * chaos/ (a separate binary that drives agents as processes) includes
#     only public headers;
#   * nobody reaches a header through '../'.
# Prints every violation as FILE:LINE: what, exits 1 if there was one.
set -uo pipefail
cd "$(dirname "$0")/.."

# Which module owns each public header.  A new header in include/ must be
# added here, so that its place in the dependency order is a decision.
declare -A owner=(
  [ea_base.h]=base [ea_log.h]=base [ea_mpread.h]=base
  [ea_membership.h]=membership [ea_transport.h]=membership [ea_wire.h]=membership
  [ea_antireplay.h]=membership
  [ea_rdzv.h]=rdzv
  [ea_ckpt.h]=ckpt
  [ea_comm.h]=train [ea_train.h]=train [ea_ipc.h]=train [ea_worker.h]=train
  [ea_config.h]=config
)
# What each module may include (besides itself).  config (include/ea_config.h,
# agent/config.c) is the job file, read by the agent and by the built-in
# worker it starts.
declare -A may=(
  [base]=""
  [membership]="base"
  [rdzv]="base membership"
  [ckpt]="base"
  [train]="base ckpt config"
  [agent]="base membership rdzv ckpt train config"
  [chaos]="base membership rdzv ckpt train config"
)
modules=$(sed -n 's/^MODULES *:= *//p' Makefile)

bad=0
violation() { echo "$1: $2"; bad=1; }

for h in include/*.h; do
  [ -n "${owner[$(basename "$h")]:-}" ] || violation "$h" "public header without an owner in scripts/check-layout.sh"
done

for f in $(git ls-files '*.c' '*.h'); do
  dir=${f%%/*}
  [ "$dir" = "$f" ] && continue
  while IFS=: read -r line inc; do
    inc=${inc#*\"}; inc=${inc%\"*}
    if [[ $inc == *../* ]]; then
      violation "$f:$line" "includes \"$inc\" through '..' (use the module's -I path)"
      continue
    fi
    [[ $dir == tests || $dir == bench || $dir == include ]] && continue
    if [ -f "include/$inc" ]; then
      o=${owner[$inc]:-}
      [ -z "$o" ] && continue
      if [ "$o" != "$dir" ] && [ "$o" != config -o "$dir" != agent ] && [ -n "${may[$dir]+x}" ] &&
         [[ " ${may[$dir]} " != *" $o "* ]]; then
        violation "$f:$line" "$dir/ must not depend on $o ($inc)"
      fi
      continue
    fi
    [ -f "$dir/$inc" ] && continue # its own private header
    for m in $modules chaos; do
      if [ -f "$m/$inc" ]; then
        violation "$f:$line" "includes $m/'s private header $inc"
        break
      fi
    done
  done < <(grep -n '^#include "' "$f" | sed 's/^\([0-9]*\):/\1:/')
done
[ $bad -eq 0 ] && echo "layout: $(git ls-files '*.c' '*.h' | wc -l) files follow the include rules"
exit $bad
