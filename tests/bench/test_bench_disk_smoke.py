"""Smoke-run ``bench/disk.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked (the disk target is a benchmark).
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_disk_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick("disk.py", timeout=180)
    out = "".join(backends.values())
    for backend, section in backends.items():
        for label in (
            "state growing",
            "after    10 cycles",
            "after   200 cycles",
            "MB total",
            "bytes/event (file)",
            "snapshots",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{out}"
        assert "bytes/event (event table)" in section or "no dbstat" in section, out
        assert "snapshot share" in section or "no dbstat" in section, out
