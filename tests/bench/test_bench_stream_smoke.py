"""Smoke-run ``bench/stream.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick


def test_stream_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick("stream.py", timeout=180)
    out = "".join(backends.values())
    for backend, section in backends.items():
        for label in (
            "(a) emit",
            "outside a stage",
            "no subscriber",
            "1 stalled (drops)",
            "4 reading",
            "(a) memory allocated",
            "(b) session",
            "no emit",
            "1 reading",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{out}"
