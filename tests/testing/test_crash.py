"""Crash test: a child process driving many sessions is SIGKILLed at random points.

It runs on the public harness, `arkhon_rheo.testing.crash_loop`, which kills
the child at seeded points, checks after each run that every commit the child
was told was stored (in `Durability.SYNC`) is in the file and that
``PRAGMA integrity_check`` says ok, resumes the sessions in a fresh child, and
at the end lets a child finish them all and replays each one. On top of that,
after each run this test checks the file as the next process will find it:
each session's events are numbered 1..n without a gap and only ever grow
(exactly-once commits), its stored state (latest snapshot plus the events
after it) equals the replay of its whole log from its initial snapshot, so
does every snapshot, each event carries the digest of the state the replay
reaches with it, and the state is the one the machine must reach after n
steps.

The second half checks the harness as a user calls it: its report, its
schedule, and its errors.

Linux (POSIX) only: it relies on SIGKILL.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import pytest

from arkhon_rheo import AgentState, ConfigurationError, Lifecycle, Patch
from arkhon_rheo.core import apply_event, fold
from arkhon_rheo.core._codec import EventCodec
from arkhon_rheo.protocols import Durability, EventKind
from arkhon_rheo.session._commit_rule import StateHasher
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.testing import CrashReport, CrashRunFailed, LostCommit, ReferenceState, crash_loop
from tests.support.crash_child import ROUNDS, SNAPSHOT_EVERY, crash_machine, expected_trace, point
from tests.support.crash_child import initial as fresh_state

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import StoredEvent

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="the crash test kills its child with SIGKILL"
)

#: Sessions the first run starts; every run starts one more.
INITIAL = 20


@dataclass
class Crashes:
    """What this test has seen of one crash loop's file so far."""

    seed: int
    runs: int = 0
    #: Each session's events as last seen: the next check must find them unchanged.
    seen: dict[str, tuple[StoredEvent, ...]] = field(default_factory=dict)
    #: At the last check, the finished sessions stored with another status.
    status_lag: dict[str, str] = field(default_factory=dict)
    #: Each session's steps (events other than resumes) at the last check.
    steps: dict[str, int] = field(default_factory=dict)


async def _verify(crashes: Crashes, db: Path) -> None:
    """Check the file after a run, beyond what `crash_loop` checks itself."""
    machine = crash_machine()
    codec = EventCodec(machine)
    hasher = StateHasher(codec)
    trace = expected_trace(ROUNDS)
    crashes.runs += 1
    crashes.status_lag.clear()
    # Opening it is the first check: SQLiteStore raises StoreCorrupt on a damaged file.
    async with SQLiteStore(db, durability=Durability.SYNC) as store:
        records = {record.session_id: record for record in await store.sessions()}
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
            assert initial == fresh_state().model_copy(update={"session_id": session_id}), where
            full = fold(machine, initial, decoded)
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
            stored = fold(machine, codec.decode_state(loaded.snapshot), tail)
            assert stored == full, f"{where}: the stored state differs from the replay of its log"
            for k in range(SNAPSHOT_EVERY, n + 1, SNAPSHOT_EVERY):
                seq, snapshot = await store.snapshot_at(session_id, k)
                assert 0 <= seq <= k, where
                assert codec.decode_state(snapshot) == fold(machine, initial, decoded[:seq]), (
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
            assert isinstance(full, ReferenceState)
            assert steps < len(trace), f"{where}: {steps} steps, more than a full run has"
            assert point(full) == trace[steps], where
            if full.lifecycle is Lifecycle.FINISHED:
                if record.status != "finished":
                    crashes.status_lag[session_id] = record.status
            else:
                assert record.status == "running", f"{where}: status {record.status!r}"
            crashes.steps[session_id] = steps


def run_crashes(tmp_path: Path, *, seed: int, backend: str, kills: int) -> CrashReport:
    crashes = Crashes(seed)
    report = crash_loop(
        "tests.support.crash_child:machine",
        "tests.support.crash_child:initial",
        path=tmp_path / "crash.db",
        kills=kills,
        sessions=INITIAL,
        new_per_run=1,
        seed=seed,
        backend=backend,
        durability=Durability.SYNC,
        commits_between_kills=40,
        snapshot_every=SNAPSHOT_EVERY,
        max_steps=3 * ROUNDS + 5,
        check=lambda db: anyio.run(_verify, crashes, db),
    )
    assert report.ok, report.summary()
    assert report.kills == kills
    assert report.lost == ()
    assert report.integrity == ()
    assert report.checks == report.runs
    # Every session ends after its full run of steps, and replays to what was committed.
    assert set(report.replays) == set(crashes.steps)
    full = len(expected_trace(ROUNDS)) - 1
    unfinished = {sid: n for sid, n in crashes.steps.items() if n != full}
    assert not unfinished, f"seed {seed}: sessions left unfinished: {unfinished}"
    assert {f"s{i:04d}" for i in range(INITIAL)} <= set(crashes.steps)
    # A session's final commit carries its status in the same transaction, so no
    # kill can leave a finished session recorded as "running".
    assert not crashes.status_lag, (
        f"finished sessions stored with another status: {crashes.status_lag}"
    )
    return report


# Two seeds on asyncio, one on trio: 21 kills in all (more than 20).
CASES = [
    pytest.param(1, "asyncio", id="seed1-asyncio"),
    pytest.param(2, "asyncio", id="seed2-asyncio"),
    pytest.param(3, "trio", id="seed3-trio"),
]


@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_sessions_survive_sigkill(tmp_path: Path, seed: int, backend: str) -> None:
    run_crashes(tmp_path, seed=seed, backend=backend, kills=7)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "backend"), CASES)
def test_sessions_survive_many_sigkills(tmp_path: Path, seed: int, backend: str) -> None:
    run_crashes(tmp_path, seed=100 + seed, backend=backend, kills=70)


# -- the harness as a user calls it ------------------------------------------------------

MACHINE = "tests.support.crash_child:machine"
STATE = "tests.support.crash_child:initial"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_quick_crash_loop_loses_nothing_acknowledged_and_replays(
    tmp_path: Path, backend: str
) -> None:
    checked: list[Path] = []
    report = crash_loop(
        MACHINE,
        STATE,
        path=tmp_path / "agent.db",
        kills=4,
        sessions=3,
        seed=7,
        backend=backend,
        check=checked.append,
    )
    assert report.ok, report.summary()
    assert report.kills == 4
    assert report.runs >= 5  # four killed, one undisturbed (and any that ended early)
    assert report.acknowledged > 0
    assert report.lost == ()
    assert report.integrity == ()
    assert report.checks == report.runs == len(checked)
    assert checked[0] == tmp_path / "agent.db"
    # The three first sessions and one more per run (unless killed before it began),
    # each replayed to a finished state.
    assert {"s0000", "s0001", "s0002"} <= set(report.replays)
    assert 3 < len(report.replays) <= 3 + report.runs
    for replay in report.replays.values():
        assert replay.ok
        assert replay.state.lifecycle is Lifecycle.FINISHED
    assert report.unfinished == ()
    assert report.failed == ()
    assert report.summary().startswith(f"4 kills over {report.runs} runs")


def test_no_kills_is_one_undisturbed_run(tmp_path: Path) -> None:
    report = crash_loop(MACHINE, STATE, path=tmp_path / "agent.db", kills=0, sessions=2)
    assert report.ok, report.summary()
    assert (report.kills, report.runs, report.checks) == (0, 1, 1)
    assert set(report.replays) == {"s0000", "s0001", "r0000-0"}
    # Each session's creation and its 12 steps (4 cycles of 3).
    assert report.acknowledged == 3 * 13


def test_a_report_says_what_was_lost() -> None:
    report = CrashReport(
        kills=1,
        runs=2,
        acknowledged=5,
        lost=(LostCommit("s0000", 4, 2), LostCommit("s0001", 0, None)),
        integrity=("after run 0: page 3 is never used",),
        checks=2,
        replays={},
        unfinished=("s0002",),
        failed=("s0003 failed",),
    )
    assert not report.ok
    assert report.summary().splitlines()[1:] == [
        "lost: s0000 acknowledged #4, stored up to #2",
        "lost: s0001 acknowledged #0, stored nothing",
        "integrity: after run 0: page 3 is never used",
        "unfinished: s0002",
        "failed: s0003 failed",
    ]


@pytest.mark.parametrize(
    ("machine", "state", "words"),
    [
        ("tests.support.crash_child", STATE, "expected MODULE:ATTR"),
        ("tests.no_such_module:machine", STATE, "no module 'tests.no_such_module'"),
        ("tests.support.crash_child:nothing", STATE, "has no attribute 'nothing'"),
        ("tests.support.crash_child:ROUNDS", STATE, "expected a Machine"),
        (MACHINE, "tests.support.crash_child:ROUNDS", "expected a function of no arguments"),
    ],
)
def test_a_bad_name_is_refused_before_any_child_runs(
    tmp_path: Path, machine: str, state: str, words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        crash_loop(machine, state, path=tmp_path / "agent.db")
    assert not (tmp_path / "agent.db").exists()


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"kills": -1}, "kills must be an integer >= 0"),
        ({"commits_between_kills": 0}, "commits_between_kills must be"),
        ({"sessions": 0, "new_per_run": 0}, "nothing to run"),
        ({"backend": "curio"}, "backend must be"),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, options: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        crash_loop(MACHINE, STATE, path=tmp_path / "agent.db", **options)  # type: ignore[arg-type]


def test_a_child_failing_on_its_own_is_an_error_with_its_output(tmp_path: Path) -> None:
    with pytest.raises(CrashRunFailed, match="broken_state cannot make a state") as caught:
        crash_loop(
            MACHINE,
            "tests.support.crash_child:broken_state",
            path=tmp_path / "agent.db",
            kills=2,
            durability=Durability.BATCHED,
        )
    assert "RuntimeError" in caught.value.output
