"""Crash test: a child process driving many sessions is SIGKILLed at random points.

After each kill the parent checks the SQLite file as the next process will find
it: it opens (never corrupt), every commit the child acknowledged (in
`Durability.SYNC`) is stored, each session's events are numbered 1..n without a
gap and only ever grow (exactly-once commits), its stored state (latest snapshot
plus the events after it) equals the replay of its whole log from its initial
snapshot, so does every snapshot, each event carries the digest of the state
the replay reaches with it, and the state is the one the machine must reach
after n events. Then the child is started again and resumes the sessions; a last
run is left alone and every session must finish with the right result.

Linux (POSIX) only: it relies on SIGKILL.
"""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentState, Lifecycle, Patch
from arkhon_rheo.protocols import Durability, EventKind
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.supervision import EventCodec, StateHasher, apply_event, replay

from .crash_child import SNAPSHOT_EVERY, Crash, crash_machine, expected_trace, planned

if TYPE_CHECKING:
    from arkhon_rheo.protocols import StoredEvent

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="the crash test kills its child with SIGKILL"
)

CHILD = Path(__file__).with_name("crash_child.py")
#: How long a child may take to open the store, or a clean run to finish.
READY_TIMEOUT = 30.0
FINISH_TIMEOUT = 120.0


@dataclass
class Crashes:
    """One crash loop's file, settings and what the parent has seen so far."""

    db: Path
    acks: Path
    seed: int
    backend: str
    rounds: int = 4
    initial: int = 20
    new_per_run: int = 1
    runs: int = 0
    kills: int = 0
    #: Each session's events as last seen: the next check must find them unchanged.
    seen: dict[str, tuple[StoredEvent, ...]] = field(default_factory=dict)
    #: At the last check, the finished sessions stored with another status.
    status_lag: dict[str, str] = field(default_factory=dict)

    def spawn(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            str(CHILD),
            str(self.db),
            str(self.acks),
            f"--seed={self.seed}",
            f"--run={self.runs}",
            f"--backend={self.backend}",
            f"--rounds={self.rounds}",
            f"--initial={self.initial}",
            f"--new-per-run={self.new_per_run}",
        ]
        self.runs += 1
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
            # SIGKILL goes to the child itself: nothing of it may run on.
            start_new_session=True,
        )


def _wait_for(child: subprocess.Popen[bytes], word: str, seen: bytearray) -> bool:
    """Read the child's output (into ``seen``, unbuffered) up to the line ``word``.

    Returns false if the child ended first (it had nothing to do).
    """
    assert child.stdout is not None
    fd = child.stdout.fileno()
    wanted = f"\n{word}\n".encode()
    deadline = time.monotonic() + READY_TIMEOUT
    while wanted not in b"\n" + seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            child.kill()
            pytest.fail(f"the child did not say {word!r} in {READY_TIMEOUT} s: {seen!r}")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            chunk = os.read(fd, 65536)
            if not chunk:
                return False
            seen += chunk
    return True


def _kill_point(rng: random.Random) -> tuple[str, float]:
    """When to kill: which line of the child's to wait for, then how long after it.

    Mostly a few to tens of ms after its first acknowledged commit (``working``),
    sometimes at that very moment, and sometimes counted from ``ready`` (the store
    is open), while it loads, leases and resumes its sessions.
    """
    roll = rng.random()
    if roll < 0.15:
        return "ready", rng.uniform(0.0, 0.1)
    if roll < 0.25:
        return "working", 0.0
    if roll < 0.5:
        return "working", rng.uniform(0.002, 0.015)
    return "working", rng.uniform(0.015, 0.08)


def _check_output(crashes: Crashes, lines: list[str]) -> None:
    failures = [line for line in lines if line.startswith("FAIL") or "Traceback" in line]
    assert not failures, f"run {crashes.runs - 1} of seed {crashes.seed}:\n" + "\n".join(lines)


def _read_acks(path: Path) -> dict[str, int]:
    """The highest acknowledged event number per session (0: its creation)."""
    acked: dict[str, int] = {}
    if not path.exists():
        return acked
    for line in path.read_text(encoding="ascii").splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a line cut short by the kill: it never was complete
        session_id, seq = line.split()
        acked[session_id] = max(acked.get(session_id, 0), int(seq))
    return acked


def _integrity(db: Path) -> None:
    connection = sqlite3.connect(db)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        connection.close()


async def _verify(crashes: Crashes, final: bool = False) -> dict[str, int]:
    """Check the file after a kill (or at the end); return each session's step count."""
    machine = crash_machine(crashes.rounds)
    codec = EventCodec(machine)
    hasher = StateHasher(codec)
    trace = expected_trace(crashes.rounds)
    acked = _read_acks(crashes.acks)
    lasts: dict[str, int] = {}
    crashes.status_lag.clear()
    # Opening it is the first check: SQLiteStore raises StoreCorrupt on a damaged file.
    async with SQLiteStore(crashes.db, durability=Durability.SYNC) as store:
        records = {record.session_id: record for record in await store.sessions()}
        for session_id, last in acked.items():
            assert session_id in records, f"acknowledged session {session_id!r} is missing"
            assert records[session_id].last_seq >= last, (
                f"{session_id}: event #{last} was acknowledged, "
                f"the store ends at #{records[session_id].last_seq}"
            )
        for session_id, record in records.items():
            where = f"seed {crashes.seed}, after run {crashes.runs - 1}, {session_id}"
            events = await store.history(session_id)
            n = record.last_seq
            assert [event.seq for event in events] == list(range(1, n + 1)), where
            previous = crashes.seen.get(session_id, ())
            assert events[: len(previous)] == previous, f"{where}: committed events changed"
            crashes.seen[session_id] = events

            decoded = [codec.decode_event(event) for event in events]
            start_seq, start = await store.snapshot_at(session_id, 0)
            assert start_seq == 0, where
            initial = codec.decode_state(start)
            assert initial == Crash(session_id=session_id), where
            full = replay(machine, initial, decoded)
            state: AgentState = initial
            digest = hasher.start(initial)
            for stored_event, event in zip(events, decoded, strict=True):
                state = apply_event(machine, state, event)
                digest.accept(digest.after(event, state))
                assert stored_event.digest == digest.value, (
                    f"{where}: event #{event.seq} was stored with the digest of another state"
                )

            loaded = await store.load(session_id)
            assert [event.seq for event in loaded.events] == list(
                range(loaded.snapshot_seq + 1, n + 1)
            ), where
            tail = [codec.decode_event(event) for event in loaded.events]
            stored = replay(machine, codec.decode_state(loaded.snapshot), tail)
            assert stored == full, f"{where}: the stored state differs from the replay of its log"
            for k in range(SNAPSHOT_EVERY, n + 1, SNAPSHOT_EVERY):
                seq, snapshot = await store.snapshot_at(session_id, k)
                assert 0 <= seq <= k, where
                assert codec.decode_state(snapshot) == replay(machine, initial, decoded[:seq]), (
                    f"{where}: the snapshot at #{seq} differs from the replay up to it"
                )

            # A resume is recorded as an event that changes nothing: the steps are
            # the other events, and each resume follows a run that stopped.
            resumes = [event for event in decoded if event.kind is EventKind.RESUME]
            for resume in resumes:
                assert resume.patch == Patch(), where
                assert resume.info is not None, where
                assert resume.info["from_seq"] == resume.seq - 1, where
            steps = n - len(resumes)
            assert isinstance(full, Crash)
            assert steps < len(trace), f"{where}: {steps} steps, more than a full run has"
            assert (tuple(full.notes), full.total, full.lifecycle) == trace[steps], where
            if full.lifecycle is Lifecycle.FINISHED:
                if record.status != "finished":
                    crashes.status_lag[session_id] = record.status
            else:
                assert record.status == "running", f"{where}: status {record.status!r}"
            lasts[session_id] = steps
        if final:
            # Every session ends after its full run of steps.
            unfinished = {sid: n for sid, n in lasts.items() if n != len(trace) - 1}
            assert not unfinished, f"seed {crashes.seed}: sessions left unfinished: {unfinished}"
    _integrity(crashes.db)
    return lasts


def crash_loop(tmp_path: Path, *, seed: int, backend: str, kills: int) -> Crashes:
    crashes = Crashes(tmp_path / "crash.db", tmp_path / "acks.txt", seed, backend)
    rng = random.Random(seed)
    while crashes.kills < kills:
        assert crashes.runs < 3 * kills + 10, "the child keeps finishing before its kill"
        child = crashes.spawn()
        try:
            word, delay = _kill_point(rng)
            seen = bytearray()
            if _wait_for(child, word, seen):
                time.sleep(delay)
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                crashes.kills += 1
            out, _ = child.communicate(timeout=FINISH_TIMEOUT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        lines = (seen + out).decode().splitlines()
        if child.returncode != -signal.SIGKILL:
            assert child.returncode == 0, "\n".join(lines)
        _check_output(crashes, lines)
        anyio.run(_verify, crashes)

    # A clean run: every session resumes and finishes.
    child = crashes.spawn()
    out, _ = child.communicate(timeout=FINISH_TIMEOUT)
    lines = out.decode().splitlines()
    assert child.returncode == 0, "\n".join(lines)
    _check_output(crashes, lines)
    assert lines[-1] == "done"
    lasts = anyio.run(_verify, crashes, True)
    # Every run creates the initial sessions that are not stored yet: all exist now.
    assert set(planned(0, crashes.initial, 0)) <= set(lasts)
    return crashes


def _check_statuses(crashes: Crashes) -> None:
    # A session's final commit carries its status in the same transaction, so no
    # kill can leave a finished session recorded as "running".
    assert not crashes.status_lag, (
        f"finished sessions stored with another status: {crashes.status_lag}"
    )


# Two seeds on asyncio, one on trio: 21 kills in all (more than 20).
CASES = [
    pytest.param(1, "asyncio", id="seed1-asyncio"),
    pytest.param(2, "asyncio", id="seed2-asyncio"),
    pytest.param(3, "trio", id="seed3-trio"),
]


@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_sessions_survive_sigkill(tmp_path: Path, seed: int, backend: str) -> None:
    crashes = crash_loop(tmp_path, seed=seed, backend=backend, kills=7)
    assert crashes.kills == 7
    _check_statuses(crashes)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_sessions_survive_many_sigkills(tmp_path: Path, seed: int, backend: str) -> None:
    crashes = crash_loop(tmp_path, seed=100 + seed, backend=backend, kills=70)
    assert crashes.kills == 70
    _check_statuses(crashes)
