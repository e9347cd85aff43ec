"""Smoke-run ``bench/scale.py --quick --faults`` on 60 sessions: every figure, on both backends.

Timings are not checked; what the bench reports about its sessions is: every
session ended and none hung, the faults were injected, and each session's end
matched its faults. Each configuration runs in the bench's own process (its
``child`` made in-process through ``smaller``), not in six fresh interpreters:
the same code per run, without six imports of the package; the peak RSS it
prints is then not each run's own, and is not checked.
"""

from __future__ import annotations

import re

from tests.support.helpers import run_bench_quick

#: The bench's ``child``, run in its own process: one configuration's figures, through JSON.
IN_PROCESS = (
    "lambda backend, *run: json.loads(json.dumps(anyio.run(run_once, *run, backend=backend)))"
)


def test_scale_bench_quick_run_reports_every_figure_and_no_hung_session() -> None:
    backends = run_bench_quick(
        "scale.py",
        timeout=300,
        extra=("--faults", "--sessions", "60"),
        smaller={"child": IN_PROCESS},
    )
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
