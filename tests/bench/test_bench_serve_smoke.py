"""Smoke-run ``bench/serve.py`` at a tiny size: a real server, the a2a-sdk's clients, 0 errors.

Nothing about the figures is checked (timings are not tested), but every
message must come back with its own reply.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("a2a", reason="the a2a extra (a2a-sdk) is not installed")

ROOT = Path(__file__).resolve().parents[2]


def test_serve_bench_tiny_run_prints_every_figure_with_no_error() -> None:
    backend = "trio"  # asyncio's server is run by tests/serve/test_a2a.py; one run suffices here
    command = [sys.executable, "bench/serve.py", "--clients", "3", "--messages", "2",
               "--alone", "2", "--backend", backend]  # fmt: skip
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "1 client x 2 messages" in done.stdout
    assert "errors: 0 of 2" in done.stdout
    assert "errors: 0 of 6" in done.stdout
    assert done.stdout.count("added latency p50") == 4, done.stdout
