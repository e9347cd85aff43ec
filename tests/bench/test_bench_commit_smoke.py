"""Smoke-run ``bench/commit.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested. The bench's
code runs on sizes smaller than its ``--quick`` ones (sessions of 10 and 100, not 100
and 1,000: the same code, a tenth of the work).
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_commit_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick(
        "commit.py",
        timeout=180,
        smaller={
            "QUICK": "Sizes(commits=500, cycles=200, asks=500, sessions=(10, 100), "
            "memory_sessions=50, commit_repeat=1, repeat=1, crowd_cycles=1_000)"
        },
    )
    out = "".join(backends.values())
    for backend, section in backends.items():
        for label in (
            "(a) commit validate+copy+check",
            "(a) commit _commit (full)",
            "history 10:",
            "history 10,000:",
            "ratio 10,000/10",
            "(b) cycle",
            "us/cycle",
            "ask echo",
            "cycle/ask",
            "fault seam: no plan",
            "ratio no-plan/baseline",
            "empty FaultPlan installed",
            "(c) sessions N=10 ",
            "(c) sessions N=100 ",
            "gc on",
            "gc off",
            "cycles/s",
            "KB per session alive",
            "(c) memory",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{out}"
