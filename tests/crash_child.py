"""The child process of the crash test (`tests/test_crash.py`); not a test module.

Run as ``python tests/crash_child.py DB ACKS --seed S --run R ...``, it opens the
SQLite store at ``DB`` in `Durability.SYNC`, prints ``ready``, then drives every
session it should: it starts the planned ones that are not in the store yet and
resumes every stored one whose state is not terminal. A listener appends
``<session_id> <seq>`` to ``ACKS`` (flushed and fsynced line by line) for each
commit *after* the store acknowledged it, and ``<session_id> 0`` once a session's
creation is acknowledged. When every session has ended it prints ``done``; the
parent usually SIGKILLs it well before that. ``FAIL ...`` lines report a session
that ended badly.

The machine loops think -> act -> observe for ``rounds`` rounds, and its stages
await small random pauses (seeded), so a kill lands at varied points: inside a
stage, inside a commit, between the commit and the acknowledgement line.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    History,
    Lifecycle,
    Machine,
    Patch,
    SessionLocked,
    StateView,
    stage,
)
from arkhon_rheo.protocols import Durability
from arkhon_rheo.store import SQLiteStore
from arkhon_rheo.supervision import EventCodec, replay

if TYPE_CHECKING:
    from arkhon_rheo.protocols import TransitionEvent

L = Lifecycle

#: Seconds a session's lease lasts: short, so a killed child's sessions free up fast.
LEASE_TTL = 0.3
#: A snapshot every this many events: loads mix a snapshot and a tail of events.
SNAPSHOT_EVERY = 3
#: The pauses a stage may take (seconds), drawn from the run's RNG.
PAUSES = (0.0, 0.0, 0.0, 0.0005, 0.001, 0.003)


class Crash(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    notes: History[str] = History()
    total: int = 0


def crash_machine(rounds: int, rng: random.Random | None = None) -> Machine[Crash]:
    """The looping machine the child runs (the parent builds it without ``rng``)."""

    async def pause() -> None:
        await anyio.sleep(rng.choice(PAUSES) if rng is not None else 0)

    @stage(reads=(), writes={"notes"}, next=L.THINKING)
    async def load(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch().append("notes", "load")

    @stage(reads={"notes"}, writes={"notes"}, next=L.ACTING)
    async def think(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch().append("notes", f"think {len(view.notes)}")

    @stage(reads={"notes"}, writes={"notes"}, next=L.OBSERVING)
    async def act(view: StateView[Crash]) -> Patch:
        await pause()
        await pause()
        return Patch().append("notes", f"act {len(view.notes)}")

    def after(state: Crash) -> Lifecycle:
        return L.FINISHED if state.notes.count("observe") >= rounds else L.THINKING

    @stage(reads={"notes", "total"}, writes={"notes", "total"}, next=after)
    async def observe(view: StateView[Crash]) -> Patch:
        await pause()
        return Patch(total=view.total + len(view.notes)).append("notes", "observe")

    return Machine(
        name="crash",
        state_type=Crash,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={L.INITIALIZED: load, L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
    )


Point = tuple[tuple[str, ...], int, Lifecycle]


def expected_trace(rounds: int) -> list[Point]:
    """``(notes, total, lifecycle)`` after each event number, from 0 (the start)."""
    notes: list[str] = []
    total = 0
    trace: list[Point] = [((), 0, L.INITIALIZED)]
    notes.append("load")
    trace.append((tuple(notes), total, L.THINKING))
    for done in range(1, rounds + 1):
        notes.append(f"think {len(notes)}")
        trace.append((tuple(notes), total, L.ACTING))
        notes.append(f"act {len(notes)}")
        trace.append((tuple(notes), total, L.OBSERVING))
        total += len(notes)
        notes.append("observe")
        trace.append((tuple(notes), total, L.FINISHED if done == rounds else L.THINKING))
    return trace


def planned(run: int, initial: int, new_per_run: int) -> list[str]:
    """The session ids run ``run`` starts unless they are stored already."""
    ids = [f"s{i:03d}" for i in range(initial)]
    return ids + [f"r{run:04d}-{i}" for i in range(new_per_run)]


class Acks:
    """Appends one line per acknowledged commit, flushed and fsynced before going on."""

    def __init__(self, path: str) -> None:
        self.file: TextIO = open(path, "a", buffering=1, encoding="ascii")  # noqa: SIM115
        self.working = False

    def write(self, session_id: str, seq: int) -> None:
        self.file.write(f"{session_id} {seq}\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def __call__(self, event: TransitionEvent) -> None:
        # Listeners run once the store acknowledged the commit (write-ahead).
        self.write(event.session_id, event.seq)
        if not self.working:
            self.working = True
            print("working", flush=True)


async def drive(args: argparse.Namespace) -> int:
    rng = random.Random(f"{args.seed}/{args.run}")
    machine = crash_machine(args.rounds, rng)
    codec = EventCodec(machine)
    acks = Acks(args.acks)
    failures: list[str] = []

    async def finish(handle: Any) -> None:
        result = await handle.result()
        if not result.ok:
            failures.append(f"{handle.session_id} ended {result.exit_reason}: {result.failure}")

    async with (
        SQLiteStore(args.db, durability=Durability.SYNC) as store,
        AgentSystem(
            store=store,
            listeners=[acks],
            lease_ttl=LEASE_TTL,
            snapshot_every=SNAPSHOT_EVERY,
            max_steps=3 * args.rounds + 5,
        ) as system,
    ):
        print("ready", flush=True)

        async def fresh(session_id: str) -> None:
            handle = await system.start(machine, Crash(), session_id=session_id)
            acks.write(session_id, 0)
            await finish(handle)

        async def resume(session_id: str) -> None:
            while True:
                loaded = await store.load(session_id)
                events = [codec.decode_event(event) for event in loaded.events]
                state = replay(machine, codec.decode_state(loaded.snapshot), events)
                if machine.is_terminal(state.lifecycle):
                    return  # ended; only its status was not stored before the kill
                try:
                    handle = await system.resume(machine, session_id)
                except SessionLocked:
                    await anyio.sleep(0.02)  # a lease whose owner's death cannot be told
                    continue
                await finish(handle)
                return

        records = {record.session_id: record for record in await store.sessions()}
        async with anyio.create_task_group() as tg:
            for session_id, record in records.items():
                if record.status not in ("finished", "failed"):
                    tg.start_soon(resume, session_id)
            for session_id in planned(args.run, args.initial, args.new_per_run):
                if session_id not in records:
                    tg.start_soon(fresh, session_id)
    for failure in failures:
        print(f"FAIL {failure}", flush=True)
    print("done", flush=True)
    return 1 if failures else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("db")
    parser.add_argument("acks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", type=int, default=0)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--initial", type=int, default=20)
    parser.add_argument("--new-per-run", type=int, default=1)
    args = parser.parse_args(argv)
    code: int = anyio.run(drive, args, backend=args.backend)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
