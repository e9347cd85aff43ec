"""Smoke-run ``bench/machines.py --quick`` on 50 sessions: every figure, on both backends.

Timings and memory figures are not checked (the bench's target is a goal, not
a test); that every session ended and was forgotten in both runs is.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_machines_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick("machines.py", timeout=300, extra=("--sessions", "50"))
    for backend, section in backends.items():
        for label in ("one machine ", "a machine per session ", "traced", "B per session"):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
        assert section.count("sessions held 0 ") == 2, section
        assert "ratio per-session / one machine: RSS" in section, section
