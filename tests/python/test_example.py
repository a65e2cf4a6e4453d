"""examples/pytorch_inplace.py runs as documented: two workers under a fake
agent train to STEPS with identical parameters, say ``done`` and exit 0 on STOP."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from test_inplace import Cluster, _digests_agree  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "pytorch_inplace.py")


def test_the_example_trains_in_place(procs):
    c = Cluster(procs)
    try:
        for _ in range(2):
            c.spawn(env={"STEPS": "20"}, script=EXAMPLE)
        for i in range(2):
            c.take(i, "hello", timeout=60)
        c.form(1, [0, 1])
        done = [c.take(i, "done", timeout=60) for i in range(2)]
        assert [d["next_step"] for d in done] == [20, 20]
        assert done[0]["digest"] == done[1]["digest"] != 0
        assert _digests_agree(c, [0, 1], 1) == 20
        for i in range(2):
            c.send(i, type="stop")
            assert c.take(i, "exiting")["code"] == 0
            assert c.p[i].wait(20) == 0
    finally:
        c.close()
