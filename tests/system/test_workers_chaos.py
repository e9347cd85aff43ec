"""Chaos: worker processes SIGKILLed and SIGSTOPped at random while sessions run.

The harness (`tests/support/chaos_workers.py`) takes the store as a parameter;
these run it on an SQLite file and on a throwaway PostgreSQL database (skipped
where there are no PostgreSQL binaries). The slow test is the issue's: 4 workers,
1,000 sessions with inbox messages and timers; the default suite runs a small
one (2 workers, 40 sessions, a few kills and a pause).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest

from tests.support.chaos_workers import ChaosReport, run_chaos

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="workers are killed with SIGKILL"),
]


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the workers share: an SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "chaos.db")


def check(report: ChaosReport) -> None:
    assert report.finished == report.sessions, report
    assert report.lost == [], report.lost[:5]
    assert report.doubled == [], report.doubled[:5]
    assert report.acknowledged > 0


async def test_a_few_kills_and_a_pause_lose_nothing_and_run_no_step_twice(
    spec: str, tmp_path: Path
) -> None:
    report = await run_chaos(
        spec,
        tmp_path,
        workers=2,
        sessions=40,
        kills=3,
        pauses=1,
        lease_ttl=1.0,
        concurrency=16,
        limit=300,
    )
    check(report)
    assert (report.kills, report.pauses) == (3, 1)


@pytest.mark.slow
async def test_four_workers_a_thousand_sessions_kills_and_pauses(
    spec: str, tmp_path: Path
) -> None:
    report = await run_chaos(
        spec,
        tmp_path,
        workers=4,
        sessions=1000,
        kills=20,
        pauses=20,
        lease_ttl=2.0,
        limit=1800,
    )
    check(report)
    assert (report.kills, report.pauses) == (20, 20)
