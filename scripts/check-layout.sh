#!/usr/bin/env bash
# The house rules of the source tree, checked from the #include lines
# (docs/layout.md explains them):
#   * a module's private headers (anywhere under MODULE/) are included only by
#     that module's own .c and .h files (and by tests/ and bench/, which test
#     internals);
#   * a module includes the public headers (include/*.h) only of the modules
#     it may depend on: base ← membership ← config, base ← membership ← rdzv,
#     base ← ckpt ← train (train also reads config), agent on top;
#   * a public header is its owner's: it may include the public headers of
#     the modules its owner may depend on, and no private header;
#   * a module may have wings, folders one level down (agent/ckpt/,
#     agent/job/, agent/obs/, agent/cli/): a wing below the loop includes
#     its own headers and public ones, never another wing's and never the
#     top floor's (the files directly in agent/: agent_int.h is the loop's
#     state): its files are components that know nothing of the loop, and
#     the top floor, which may include any wing's header, wires them to it.
#     So no wing and the top floor form a circle;
#   * one wing is the entry floor, above the loop, not below it: agent/cli/
#     (main, the one-shot commands, the smoke run's report).  It starts the
#     loop and may include any header of its module; nothing else in the
#     module may include its headers (the loop never calls the command line),
#     so it forms no circle;
#   * in agent/, only agent.c (the loop) calls the rendezvous core's
#     functions that change it (those of include/ea_rdzv.h whose first
#     parameter is a non-const ea_rdzv *); the rest of agent/ posts intents
#     (ea__agent_do, agent_int.h);
#   * chaos/ (a separate binary that drives agents as processes) includes
#     only public headers;
#   * nobody reaches a header through '../'.
# Prints every violation as FILE:LINE: what, exits 1 if there was one.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# Which module owns each public header.  A new header in include/ must be
# added here, so that its place in the dependency order is a decision.
declare -A owner=(
  [ea_base.h]=base [ea_json.h]=base [ea_log.h]=base [ea_mpread.h]=base
  [ea_membership.h]=membership [ea_transport.h]=membership [ea_wire.h]=membership
  [ea_antireplay.h]=membership [ea_admit.h]=membership
  [ea_config.h]=config
  [ea_rdzv.h]=rdzv
  [ea_ckpt.h]=ckpt
  [ea_comm.h]=train [ea_train.h]=train [ea_ipc.h]=train [ea_worker.h]=train
)
# What each module may include (besides itself).  config (include/ea_config.h,
# config/keys.c, config/config.c) is the job file: its membership section is an
# ea_swim_config; the agent and the built-in worker it starts read it.
declare -A may=(
  [base]=""
  [membership]="base"
  [config]="base membership"
  [rdzv]="base membership"
  [ckpt]="base"
  [train]="base ckpt config"
  [agent]="base membership config rdzv ckpt train"
  [chaos]="base membership config rdzv ckpt train"
)
modules=$(sed -n 's/^MODULES *:= *//p' Makefile)

bad=0
violation() { echo "$1: $2"; bad=1; }

for h in include/*.h; do
  [ -n "${owner[$(basename "$h")]:-}" ] || violation "$h" "public header without an owner in scripts/check-layout.sh"
done
for m in $modules; do
  [ -n "${may[$m]+x}" ] || violation Makefile "module $m has no place in the dependency order of scripts/check-layout.sh"
done

# Which module holds each private header (by name: names are unique), and
# in which of its wings ("" for the module's top floor).
declare -A private=() wing_of=()
wing() { local rest=${1#*/}; [[ $rest == */* ]] && echo "${rest%%/*}"; }
for m in $modules chaos; do
  for h in $(git ls-files "$m/*.h"); do
    private[$(basename "$h")]=$m
    wing_of[$(basename "$h")]=$(wing "$h")
  done
done
entry=cli # the module's entry floor (agent/cli/): above the loop

for f in $(git ls-files '*.c' '*.h'); do
  dir=${f%%/*}
  [ "$dir" = "$f" ] && continue
  mod=$dir
  [ "$dir" = include ] && mod=${owner[$(basename "$f")]:-}
  while IFS=: read -r line inc; do
    inc=${inc#*\"}; inc=${inc%\"*}
    if [[ $inc == *../* ]]; then
      violation "$f:$line" "includes \"$inc\" through '..' (use the module's -I path)"
      continue
    fi
    [[ $dir == tests || $dir == bench ]] && continue
    if [ -f "include/$inc" ]; then
      o=${owner[$inc]:-}
      [ -z "$o" ] && continue
      if [ -n "$mod" ] && [ "$o" != "$mod" ] && [ -n "${may[$mod]+x}" ] &&
         [[ " ${may[$mod]} " != *" $o "* ]]; then
        violation "$f:$line" "$mod/ must not depend on $o ($inc)"
      fi
      continue
    fi
    p=${private[$inc]:-}
    [ -z "$p" ] && continue
    if [ "$dir" = include ]; then
      violation "$f:$line" "a public header includes $p/'s private header $inc"
    elif [ "$p" != "$dir" ]; then
      violation "$f:$line" "includes $p/'s private header $inc"
    else
      fw=$(wing "$f") hw=${wing_of[$inc]}
      if [ "$fw" = "$entry" ]; then
        : # the entry floor includes what it starts
      elif [ "$hw" = "$entry" ]; then
        violation "$f:$line" "includes the entry floor's $inc: the loop and its wings never call the command line above them"
      elif [ -n "$fw" ] && [ -n "$hw" ] && [ "$fw" != "$hw" ]; then
        violation "$f:$line" "the $dir/$fw/ wing includes the $dir/$hw/ wing's header $inc"
      elif [ -n "$fw" ] && [ -z "$hw" ]; then
        violation "$f:$line" "the $dir/$fw/ wing includes the top floor's $inc: a component below the loop does not call up into it; its wiring to the loop belongs on the top floor (docs/layout.md)"
      fi
    fi
  done < <(grep -n '^#include "' "$f")
done
# The core's mutators, from its header: called in agent/ only by the loop.
mutators=$(sed -nE 's/^[a-z].*[ *](ea_rdzv_[a-z0-9_]+)\(ea_rdzv \*.*/\1/p' include/ea_rdzv.h | sort -u | paste -sd'|')
if [ -n "$mutators" ]; then
  while IFS=: read -r f line text; do
    [ "$f" = agent/agent.c ] && continue
    violation "$f:$line" "calls the rendezvous core's $(grep -oE "$mutators" <<<"$text" | head -1) outside the loop: post an intent (ea__agent_do)"
  done < <(git ls-files 'agent/*.c' 'agent/*.h' | xargs grep -nE "\b($mutators)\(" /dev/null | grep -vE '^[^:]+:[0-9]+:\s*(/?\*|//)')
fi
[ $bad -eq 0 ] && echo "layout: $(git ls-files '*.c' '*.h' | wc -l) files follow the include rules"
exit $bad
