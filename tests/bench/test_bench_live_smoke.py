"""Smoke-run ``bench/live.py --quick`` at N = 100 and 300: both backends, every figure printed.

Timings are not checked: the run must finish every session of every size (the
bench raises on a session that did not run its cycles) and print each figure.
Each size runs in the bench's own process (its ``child`` made in-process
through ``smaller``), not in four fresh interpreters: the same code per run,
without four imports of the package; the peak RSS it prints is then not each
run's own, and is not checked.
"""

from __future__ import annotations

from tests.support.helpers import run_bench_quick

#: The bench's ``child``, run in its own process: one size's figures, through JSON.
IN_PROCESS = "lambda backend, n: json.loads(json.dumps(anyio.run(run_once, n, backend=backend)))"


def test_live_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick(
        "live.py",
        timeout=300,
        extra=("--sessions", "100,300"),
        smaller={"child": IN_PROCESS},
    )
    for backend, section in backends.items():
        for size in ("N=100 ", "N=300 "):
            assert size in section, f"{size!r} missing for {backend}:\n{section}"
        for figure in ("cycles/s", "of N=100", "KB per live session", "GC", "collections"):
            assert section.count(figure) == 2, f"{figure!r} for {backend}:\n{section}"
