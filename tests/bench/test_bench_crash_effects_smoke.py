"""Smoke-run ``bench/crash_effects.py --quick``: SIGKILLs on both backends, no effect twice.

Timings are not tested; the run's outcome is: nothing acknowledged lost, every
session replayed, every tool call executed once (as many executed as called)
and none duplicated, the ambiguous ones having gone to the gate.
"""

from __future__ import annotations

import re

import pytest

from tests.support.helpers import run_bench_quick

pytestmark = pytest.mark.slow

_EFFECTS = re.compile(r"effects: (\d+) calls, (\d+) executed, (\d+) duplicated, (\d+) ambiguous")


def test_crash_effects_bench_quick_run_duplicates_no_effect() -> None:
    backends = run_bench_quick("crash_effects.py", timeout=600)
    for backend, section in backends.items():
        assert "0 lost" in section, section
        assert "(0 failed)" in section, section
        assert "(0 diverged)" in section, section
        found = _EFFECTS.search(section)
        assert found is not None, f"no effects line for {backend}:\n{section}"
        calls, executed, duplicated, ambiguous = map(int, found.groups())
        assert calls > 0
        assert (executed, duplicated) == (calls, 0), section
        assert 0 <= ambiguous <= calls
        assert "most times one effect happened: 1" in section, section
