"""Smoke-run ``bench/chaos.py --quick`` on 60 faulted sessions: both backends, none hung.

Timings are not tested; the run's outcome is: no hung session and no violation,
and the same seed gives the same report on asyncio and trio.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_chaos_bench_quick_run_reports_no_hang_and_no_violation() -> None:
    backends = run_bench_quick("chaos.py", timeout=300, extra=("--sessions", "60"))
    for backend, section in backends.items():
        for label in ("sessions                        60", "exit: failed", "worst fault fatal"):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
        assert "hung 0, violations 0" in section, section
    tables = [section.split("  wall")[0].split("\n", 1)[1] for section in backends.values()]
    assert tables[0] == tables[1]  # the same faults, the same outcomes, on both backends
