"""Smoke-run ``bench/rate.py --quick`` on a tiny configuration: both backends, every figure.

Nothing about the figures themselves is checked, but for what the governor
promises whatever the timing: with it, no window holds more than the limit.
"""

from __future__ import annotations

import re

from tests.support.helpers import run_bench_quick


def test_rate_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick(
        "rate.py",
        timeout=180,
        extra=("--sessions", "12", "--limit", "4", "--window", "1", "--deadline", "30"),
    )
    for backend, section in backends.items():
        for label in (
            "(a) without governor",
            "(b) with governor",
            "requests, at most",
            "/min against",
            "429s received",
            "sessions finished",
            "p99",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
        governed = section.split("(b) with governor", 1)[1]
        peak = re.search(r"at most\s+(\d+) in any 1 s \(limit 4\)", governed)
        assert peak is not None, governed
        assert int(peak.group(1)) <= 4, governed
        assert "sessions finished    12/12" in governed, governed
