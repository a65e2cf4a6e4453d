#!/usr/bin/env bash
# The Python client package (python/elastic_agent) under pytest: the protocol
# against the agent's exact bytes, the state layout, the generation loop
# against a fake agent, and in-place re-formation of real gloo workers.
# Debian's python3-torch/-msgpack/-pytest are for /usr/bin/python3 (python3
# on PATH may be a pyenv shim without them): scripts/deps.sh installs them.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${EA_PYTHON:-/usr/bin/python3}
"$PY" -c 'import msgpack, pytest' 2>/dev/null || { echo "skip: $PY lacks msgpack or pytest (scripts/deps.sh installs python3-msgpack python3-pytest)"; exit 77; }
"$PY" -m pytest -q -p no:cacheprovider tests/python
rc=$?
[ $rc -eq 5 ] && { echo "pytest collected no test"; exit 1; }
exit $rc
