"""Smoke-run ``bench/actors.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "actors.py"

LABELS = (
    "tell ",
    "msg/s",
    "ask ",
    "ask timeout=inf",
    "us/rt",
    "bytes per idle actor",
    "scale ours",
    "scale bare",
    "ns/msg",
    "(target <= 1.5x)",
    "(target <= 2x)",
    "(target ~1x)",
)


def test_actor_bench_quick_runs_on_both_backends() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(BENCH), "--quick"],
        check=True,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert result.stderr == "", result.stderr
    sections = result.stdout.split("backend: ")[1:]
    assert [section.split("\n", 1)[0] for section in sections] == ["asyncio", "trio"]
    for section in sections:
        missing = [label for label in LABELS if label not in section]
        assert not missing, f"missing {missing} in:\n{section}"
    assert "dead_letter" not in result.stdout
