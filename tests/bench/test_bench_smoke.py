"""Smoke-run ``bench/actors.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested.
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
    for section in run_bench_quick("actors.py", timeout=120).values():
        missing = [label for label in LABELS if label not in section]
        assert not missing, f"missing {missing} in:\n{section}"
