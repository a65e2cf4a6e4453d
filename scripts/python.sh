# Sourced, not run: the project's Python for every script that runs Python.
#   EA_PYTHON     the interpreter (default: the virtualenv scripts/deps.sh
#                 makes from requirements.txt, with the pinned torch)
#   EA_TORCHRUN   the torchrun beside it
# Never a bare `python3` (on PATH it may be a pyenv shim that sees neither
# the virtualenv nor Debian's packages) nor /usr/bin/python3 (Debian's, no
# torch 2.x).
EA_PYTHON=${EA_PYTHON:-${EA_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv}/bin/python}
EA_TORCHRUN=${EA_TORCHRUN:-$(dirname "$EA_PYTHON")/torchrun}
export EA_PYTHON EA_TORCHRUN
if [ ! -x "$EA_PYTHON" ]; then
  echo "$(basename "$0"): $EA_PYTHON is missing: run scripts/deps.sh (make check and make demo do)" >&2
  exit 1
fi
