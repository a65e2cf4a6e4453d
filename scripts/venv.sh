#!/usr/bin/env bash
# The project's virtualenv: Debian's python3 -m venv, then exactly the pinned
# packages of requirements.txt from PyPI (torch among them).  A stamp inside
# the virtualenv holds the hash of the requirements it was made from: a
# second run with the same file installs nothing; a changed file reinstalls
# into the same virtualenv (pip removes nothing, so a package dropped from
# the file stays until `rm -rf .venv`).  Called by scripts/deps.sh.
#
#   EA_VENV=DIR   where (default: .venv in the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EA_VENV:-$PWD/.venv}
REQ=$PWD/requirements.txt
want=$(sha256sum "$REQ" | cut -d' ' -f1)
stamp=$VENV/.ea-requirements.sha256
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
# Debian's interpreter, not a pyenv shim: the venv must not depend on a
# per-user installation that CI's machine may not have.
base=/usr/bin/python3
[ -x "$base" ] || base=$(command -v python3)
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  echo "deps: creating the virtualenv $VENV" >&2
  "$base" -m venv "$VENV"
fi
echo "deps: installing requirements.txt into $VENV (torch is a few GB the first time)" >&2
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q -r "$REQ"
echo "$want" >"$stamp"
echo "deps: virtualenv ready in $(($(date +%s) - start)) s ($(du -sh "$VENV" | cut -f1))" >&2
