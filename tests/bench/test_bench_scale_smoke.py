"""Smoke-run ``bench/scale.py --quick --faults`` on 60 sessions: every figure, on both backends.

Timings are not checked; what the bench reports about its sessions is: every
session ended and none hung, the faults were injected, and each session's end
matched its faults.
"""

from __future__ import annotations

import re

from tests.support.helpers import run_bench_quick


def test_scale_bench_quick_run_reports_every_figure_and_no_hung_session() -> None:
    backends = run_bench_quick("scale.py", timeout=300, extra=("--faults", "--sessions", "60"))
    for backend, section in backends.items():
        for label in ("memory ", "sqlite-batched ", "faulted "):
            assert f"  {label}" in section, f"{label!r} missing for {backend}:\n{section}"
        for figure in ("cycles/s", "KB/session", "p50", "p99", "GC", "progress at half"):
            assert section.count(figure) == 3, f"{figure!r} for {backend}:\n{section}"
        assert section.count("ended 60, hung 0") == 3, section
        assert section.count("finished 60") == 2, section  # the runs without faults
        assert "outcome mismatches 0" in section, section
        injected = re.search(r"faults injected over [\d,]+ stage calls: (.*?)   ", section)
        assert injected is not None, section
        assert {"fatal", "recoverable", "transient"} <= set(re.findall(r"[a-z]+", injected[1]))
