#!/usr/bin/env bash
# The Python client package (python/elastic_agent) under pytest: the protocol
# against the agent's exact bytes, the state layout, the generation loop
# against a fake agent, and in-place re-formation of real gloo workers.
# The project's virtualenv (scripts/python.sh; scripts/deps.sh makes it from
# requirements.txt) has torch, msgpack and pytest.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/python.sh
PY=$EA_PYTHON
"$PY" -c 'import msgpack, pytest, torch' || { echo "FAIL: $PY lacks msgpack, pytest or torch (scripts/deps.sh installs requirements.txt)"; exit 1; }
"$PY" -m pytest -q -p no:cacheprovider tests/python
rc=$?
[ $rc -eq 5 ] && { echo "pytest collected no test"; exit 1; }
exit $rc
