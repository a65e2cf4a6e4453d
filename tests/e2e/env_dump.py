"""Writes what a worker was given — its environment, its arguments and its
working directory — to $EA_ENV_DUMP_DIR/rank<RANK>.json, and exits 0.  Run
under torchrun and under elastic-agent in restart mode by
tests/e2e/test_torchrun_env.sh, which compares the two key by key."""
import json
import os
import sys

d = os.environ["EA_ENV_DUMP_DIR"]
with open(os.path.join(d, "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump({"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd()}, f, sort_keys=True)
