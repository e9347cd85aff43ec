"""Smoke-run ``bench/actors.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested. The bench's
code runs on sizes smaller than its ``--quick`` ones (a fifth of the messages, best of 1).
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick

LABELS = (
    "tell ",
    "msg/s",
    "ask ",
    "ask timeout=inf",
    "us/rt",
    "bytes per idle actor",
    "scale ours",
    "scale bare",
    "ns/msg",
    "(target <= 1.5x)",
    "(target <= 2x)",
    "(target ~1x)",
)


def test_actor_bench_quick_runs_on_both_backends() -> None:
    smaller = {
        "QUICK": "Sizes(tell=2_000, ask=400, idle_actors=200, scale_messages=2_000, "
        "scale_bare_messages=500, scale_small=10, scale_large=200, repeat=1)"
    }
    for section in run_bench_quick("actors.py", timeout=120, smaller=smaller).values():
        missing = [label for label in LABELS if label not in section]
        assert not missing, f"missing {missing} in:\n{section}"
