"""Smoke-run ``bench/store.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested. LangGraph
(the reference, from the optional ``bench`` extra) may or may not be installed:
either its lines are there, or the note saying how to install it.
"""

from __future__ import annotations

from .helpers import run_bench_quick

MISSING = "langgraph not installed: pip install -e .[bench]"


def test_store_bench_quick_run_prints_every_figure_on_both_backends() -> None:
    backends = run_bench_quick("store.py", timeout=180)
    out = "".join(backends.values())
    for backend, section in backends.items():
        for label in (
            "(1) one session",
            "ours sync    driver=auto",
            "ours batched driver=auto",
            "ours, no store (runtime alone)",
            "(2) sessions N=10,",
            "(2) sessions N=100,",
            "ours sync ",
            "ours batched ",
            "ours batched, tuned GC",
            "x the default GC",
            "us/cycle",
            "cycles/s",
            "write tx, largest batch",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{out}"
    asyncio = backends["asyncio"]
    for label in (
        "driver=aiosqlite (aiosqlite)",
        "auto/aiosqlite speed",
        "(a) one tx per commit, sync",
        "(a) one tx per commit, batched",
        "ours/(a)",
        "(3) bytes on disk",
        "after    10 cycles: ours",
        "after   200 cycles: ours",
    ):
        assert label in asyncio, f"{label!r} missing for asyncio:\n{out}"
    if MISSING in asyncio:
        assert "(b) langgraph" not in asyncio, out
    else:
        for label in (
            "(b) langgraph durability=sync",
            "(b) langgraph durability=async, its default",
            "langgraph sync / ours sync",
            "(target >= 7x)",
            "ours sync/(b)",
            "langgraph/ours",
        ):
            assert label in asyncio, f"{label!r} missing for asyncio:\n{out}"
    assert "(b) langgraph" not in backends["trio"], out
