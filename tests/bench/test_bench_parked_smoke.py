"""Smoke-run ``bench/parked.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked (timings are not tested), but
that no parked session is held in memory is: the system holds 0 sessions.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_parked_bench_quick_run_prints_every_figure_and_holds_no_session() -> None:
    backends = run_bench_quick(
        "parked.py",
        timeout=300,
        # Sizes smaller than --quick's: the figures' code, not their size, is under test.
        smaller={"QUICK": "Sizes(parked=300, traced=200, waiting=100, sends=30, flood=12)"},
    )
    for backend, section in backends.items():
        for label in (
            "(1) traced Python memory per parked session",
            "(1) RSS per parked session",
            "(2) send -> applied",
            "p50",
            "p99",
            "(3) flood",
            "ratio",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
        assert section.count("(sessions held in memory: 0)") == 2, section
