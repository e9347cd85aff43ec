"""Smoke-run ``bench/workers.py`` on a tiny workload: it must run and print every figure.

It runs against the test run's throwaway PostgreSQL server (``--url``), so it
skips, saying why, where there are no PostgreSQL binaries. Nothing about the
figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def test_workers_bench_tiny_run_prints_every_figure(postgres_server: Any) -> None:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [
            *(sys.executable, "-W", "error::ResourceWarning", str(ROOT / "bench" / "workers.py")),
            *("--url", postgres_server.url, "--sessions", "12", "--cycles", "2"),
            *("--workers", "1", "2"),
        ],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    out = result.stdout
    for label in (
        "12 sessions x 2 cycles",
        "SQLite batched, 1 process",
        "PostgreSQL, 1 worker ",
        "PostgreSQL, 2 workers",
        "cycles/s",
        "step p50",
        "p99",
        "1 worker on PostgreSQL / 1 process on SQLite:",
        "scaling: 2 workers / 1 worker:",
    ):
        assert label in out, f"{label!r} missing:\n{out}"
    assert ":pw@" not in out  # the URL's password is never printed
