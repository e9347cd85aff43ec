"""Poison sessions: a step that kills its worker's process is not claimed again forever.

Worker processes (`tests/support/poison_worker.py`) serve a store (an SQLite
file, a PostgreSQL database) holding a session whose step SIGKILLs the process
running it. Each claim of it loses its worker; past the workers'
``max_claims_without_progress`` the next claim fails it instead (error type
``PoisonSession``, naming the count and the stage), and that worker goes on
serving other sessions.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, SQLiteStore
from arkhon_rheo.protocols import EventKind
from arkhon_rheo.system import Worker
from tests.support.chaos_workers import ROOT, open_store
from tests.support.poison_worker import POISON, Job, Phase

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="the step kills with SIGKILL"),
]

LIMIT = 2
TTL = 0.5


@pytest.fixture(params=["sqlite", "postgres"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the workers share: an SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return str(tmp_path / "poison.db")


def start_worker(spec: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.support.poison_worker", spec, str(TTL), str(LIMIT)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)


async def status(system: AgentSystem, session_id: str) -> str:
    return (await system.stored(POISON, session_id).record()).status


async def test_a_step_that_kills_its_worker_fails_its_session_past_the_limit(spec: str) -> None:
    async with open_store(spec, paused=False) as store, AgentSystem(store=store) as system:
        poisoned = (await system.submit(POISON, Job(poison=True))).session_id
        deaths = 0
        worker = start_worker(spec)
        deadline = time.monotonic() + 60
        try:
            while await status(system, poisoned) != "failed":
                assert time.monotonic() < deadline, "the poison session was never failed"
                if worker.poll() is not None:  # its claim ran the step: a new one claims
                    assert worker.returncode == -signal.SIGKILL
                    deaths += 1
                    worker = start_worker(spec)
                await anyio.sleep(0.05)
            # Claimed LIMIT times, each run lost with its worker; the next claim failed it.
            assert deaths == LIMIT
            state = await system.stored(POISON, poisoned).state()
            assert state.lifecycle is Phase.FAILED
            assert state.last_error is not None
            assert state.last_error.error_type == "PoisonSession"
            assert f"claimed {LIMIT} times" in state.last_error.message
            assert "'work'" in state.last_error.message
            assert state.last_error.stage == "work"
            history = await system.stored(POISON, poisoned).history()
            assert history[-1].kind is EventKind.FAILURE
            kinds = [event.kind for event in history]
            assert kinds.count(EventKind.RESUME) == LIMIT
            # The worker that failed it goes on serving the others.
            healthy = (await system.submit(POISON, Job())).session_id
            while await status(system, healthy) != "finished":
                assert time.monotonic() < deadline, "the healthy session was never driven"
                assert worker.poll() is None
                await anyio.sleep(0.05)
            assert (await system.stored(POISON, healthy).state()).done
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(worker.wait, 30)
        assert worker.returncode == 0


async def test_the_limit_is_a_positive_count_or_none(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "limit.db")) as store:
        with pytest.raises(ConfigurationError, match="max_claims_without_progress"):
            Worker(store, [POISON], max_claims_without_progress=0)
        Worker(store, [POISON], max_claims_without_progress=None)
