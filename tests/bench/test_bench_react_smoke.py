"""Smoke-run ``bench/react.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_react_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick("react.py", timeout=180)
    for backend, section in backends.items():
        for label in (
            "(a) bare supervised loop",
            "(b) bare loop + model and tool calls",
            "(c) ReAct engine",
            "us/cycle",
            "cycles/s",
            "engine/bare",
            "engine/(bare + calls)",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
