"""Smoke-run ``bench/store.py --quick``: it must run on both backends and print every figure.

Nothing about the figures themselves is checked; timings are not tested. LangGraph
(the reference, from the optional ``bench`` extra) may or may not be installed:
without it the bench prints how to install it and none of its figures; with it, the
test that checks LangGraph's figures runs too.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.helpers import run_bench_quick

MISSING = "langgraph not installed: pip install -e .[bench]"
REFERENCE_LABELS = (
    "(b) langgraph durability=sync",
    "(b) langgraph durability=async, its default",
    "langgraph sync / ours sync",
    "(target >= 7x)",
    "ours sync/(b)",
    "langgraph/ours",
)


def _have_langgraph() -> bool:
    try:
        return importlib.util.find_spec("langgraph.checkpoint.sqlite.aio") is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


HAVE_LANGGRAPH = _have_langgraph()


@pytest.fixture(scope="module")
def backends() -> dict[str, str]:
    """One quick run of the bench on both backends, shared by this module's tests.

    The bench's code on sizes smaller than its ``--quick`` ones: the same code, under
    half the work (crowds of 10 and 30 sessions, 50 cycles on disk).
    """
    return run_bench_quick(
        "store.py",
        timeout=180,
        smaller={
            "QUICK": "Sizes(cycles=20, sessions=(10, 30), disk=(10, 50), repeat=1, "
            "reference_crowd=30, gil_transactions=2)"
        },
    )


def test_store_bench_quick_run_prints_every_figure_on_both_backends(
    backends: dict[str, str],
) -> None:
    out = "".join(backends.values())
    for backend, section in backends.items():
        for label in (
            "(1) one session",
            "ours sync    driver=auto",
            "ours batched driver=auto",
            "floor: plain sqlite3, same rows and fsynced tx",
            "ours sync/floor",
            "ours, no store (runtime alone)",
            "(2) sessions N=10,",
            "(2) sessions N=30,",
            "ours sync ",
            "ours batched ",
            "ours batched, tuned GC",
            "(5) where a durable commit's time goes, N=30",
            "no store (runtime alone)",
            "MemoryStore",
            "other threads",
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
        "after    50 cycles: ours",
        "(4) the interpreter lock: a 500-row update in a thread",
        "with the main thread idle",
        "with it running Python",
    ):
        assert label in asyncio, f"{label!r} missing for asyncio:\n{out}"
    # LangGraph's saver is asyncio-only: trio never shows its figures.
    for label in REFERENCE_LABELS:
        assert label not in backends["trio"], out
    if not HAVE_LANGGRAPH:
        assert MISSING in asyncio, out
        for label in REFERENCE_LABELS:
            assert label not in asyncio, out


@pytest.mark.skipif(
    not HAVE_LANGGRAPH, reason="the reference needs the extra: pip install -e .[bench]"
)
def test_store_bench_prints_the_langgraph_reference_when_installed(
    backends: dict[str, str],
) -> None:
    asyncio = backends["asyncio"]
    assert MISSING not in asyncio, asyncio
    for label in REFERENCE_LABELS:
        assert label in asyncio, f"{label!r} missing for asyncio:\n{asyncio}"
