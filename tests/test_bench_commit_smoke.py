"""Smoke-run ``bench/commit.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "commit.py"


def test_commit_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=180,
        check=True,
    )
    assert result.stderr == "", result.stderr
    out = result.stdout
    assert "dead_letter" not in out
    sections = out.split("backend: ")
    backends = {section.split("\n", 1)[0].strip(): section for section in sections[1:]}
    assert set(backends) == {"asyncio", "trio"}, out
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
            "(c) sessions N=100 ",
            "(c) sessions N=1,000 ",
            "gc on",
            "gc off",
            "cycles/s",
            "KB per session alive",
            "(c) memory",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{out}"
