"""Smoke-run ``bench/long_conversation.py --quick``, in memory and ``--durable``: every figure.

Nothing about the figures themselves is checked; timings are not tested.
"""

from __future__ import annotations

import pytest

from tests.support.helpers import run_bench_quick


@pytest.mark.parametrize("extra", [(), ("--durable",)], ids=["memory", "durable"])
def test_long_conversation_bench_quick_run_prints_every_figure_on_both_backends(
    extra: tuple[str, ...],
) -> None:
    backends = run_bench_quick("long_conversation.py", timeout=180, extra=extra)
    for backend, section in backends.items():
        for label in (
            "whole conversation",
            "max_context_tokens, fits",
            "max_context_tokens, trims",
            "us/cycle at turn 10:",
            "turn 20:",
            "turn 20/turn 10",
        ):
            assert label in section, f"{label!r} missing for {backend}:\n{section}"
