"""A session's durable inbox: messages applied exactly once, in order; parking; timers."""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING, ClassVar

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel

from arkhon_rheo import (
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Machine,
    MemoryStore,
    SessionNotFound,
)
from arkhon_rheo.errors import InboxFull, MessageRefused
from arkhon_rheo.protocols import EventKind, Receive
from arkhon_rheo.session._record import Session, session_of
from arkhon_rheo.testing import VirtualClock
from tests.support.tickets import (
    TICKETS,
    CloseTicket,
    Escalate,
    Note,
    Phase,
    Ticket,
    opened,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from arkhon_rheo import TransitionEvent
    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio


class Applied:
    """An event listener: wait until ``count`` messages have been applied."""

    def __init__(self) -> None:
        self.events: list[TransitionEvent] = []
        self._changed = anyio.Event()

    def __call__(self, event: TransitionEvent) -> None:
        if event.info and "message" in event.info:
            self.events.append(event)
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(30):
            while len(self.events) < count:
                await self._changed.wait()


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    from arkhon_rheo import SQLiteStore

    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    async with made:
        yield made


async def open_ticket(system: AgentSystem, session_id: str = "t1") -> None:
    result = await system.run(TICKETS, Ticket(), session_id=session_id)
    assert result.exit_reason is ExitReason.WAITING
    assert result.ok


async def test_a_session_parks_then_a_message_wakes_it_and_is_applied(store: Store) -> None:
    async with AgentSystem(store=store) as system:
        await open_ticket(system)
        record = await system.stored(TICKETS, "t1").record()
        assert record.status == "waiting"
        assert record.waiting == {
            "state": "OPEN",
            "stage": "Triage".lower(),
            "accepts": ["close_ticket", "hold", "note", "remind"],
        }
        assert record.wake_at is not None  # the reminder the opening step scheduled
        assert system.sessions() == []  # parked: nothing held here

        sent = await system.send(TICKETS, "t1", Note(text="it smokes"))
        assert sent.position == 2  # 1 is the reminder
        assert not sent.duplicate
        assert sent.handle is not None
        result = await sent.handle.result()
        assert result.exit_reason is ExitReason.WAITING
        assert result.state.notes == ("opened: printer on fire", "it smokes")

        history = await system.stored(TICKETS, "t1").history()
        applied = [event for event in history if event.info and "message" in event.info]
        assert len(applied) == 1
        assert applied[0].kind is EventKind.STEP
        assert applied[0].stage == "triage"
        assert applied[0].info is not None
        assert applied[0].info["message"]["payload"] == {"text": "it smokes"}
        assert applied[0].info["message"]["id"] == sent.message_id
        report = await system.stored(TICKETS, "t1").replay(reexecute=True)
        assert report.ok, report.divergence

        sent = await system.send(TICKETS, "t1", {"kind": "CloseTicket"})
        assert sent.handle is not None
        assert (await sent.handle.result()).exit_reason is ExitReason.FINISHED
        assert (await system.stored(TICKETS, "t1").record()).status == "finished"


async def test_a_refused_message_stores_nothing(store: Store) -> None:
    async with AgentSystem(store=store) as system:
        await open_ticket(system)
        before = await store.messages("t1")

        class Stranger(BaseModel):
            x: int

        with pytest.raises(MessageRefused, match="not one it accepts"):
            await system.send(TICKETS, "t1", Stranger(x=1))
        with pytest.raises(MessageRefused, match="note message is invalid: text"):
            await system.send(TICKETS, "t1", {"kind": "Note", "text": 3})
        with pytest.raises(MessageRefused, match="say which in 'kind'"):
            await system.send(TICKETS, "t1", {"text": "no kind"})
        with pytest.raises(MessageRefused, match="pydantic model or a mapping"):
            await system.send(TICKETS, "t1", "just text")
        with pytest.raises(SessionNotFound):
            await system.send(TICKETS, "nobody", Note(text="hi"))
        assert await store.messages("t1") == before
        closing = await system.send(TICKETS, "t1", CloseTicket())
        assert closing.handle is not None
        await closing.handle.result()
        with pytest.raises(MessageRefused, match="has ended"):
            await system.send(TICKETS, "t1", Note(text="after the end"))


async def test_a_resent_message_id_is_applied_once(store: Store) -> None:
    async with AgentSystem(store=store) as system:
        await open_ticket(system)
        first = await system.send(TICKETS, "t1", Note(text="once"), message_id="m-1")
        assert first.handle is not None
        await first.handle.result()
        again = await system.send(TICKETS, "t1", Note(text="once"), message_id="m-1")
        assert again.duplicate
        assert again.position == first.position
        if again.handle is not None:
            await again.handle.result()
        state = await system.stored(TICKETS, "t1").state()
        assert state.notes.count("once") == 1


async def test_messages_from_concurrent_senders_are_applied_in_the_order_stored(
    store: Store,
) -> None:
    applied = Applied()
    async with AgentSystem(store=store, listeners=[applied]) as system:
        await open_ticket(system)
        positions: dict[int, str] = {}

        async def sender(name: str) -> None:
            for index in range(5):
                text = f"{name}{index}"
                sent = await system.send(TICKETS, "t1", Note(text=text))
                positions[sent.position] = text

        async with anyio.create_task_group() as group:
            for name in "abc":
                group.start_soon(sender, name)
        await applied.wait_for(15)
        state = await system.stored(TICKETS, "t1").state()
        expected = [positions[p] for p in sorted(positions)]
        assert list(state.notes[1:]) == expected
        # Each sender's own messages in the order it sent them.
        for name in "abc":
            mine = [note for note in state.notes if note.startswith(name)]
            assert mine == [f"{name}{i}" for i in range(5)]


async def test_a_full_inbox_refuses_a_message_and_stores_nothing(store: Store) -> None:
    async with AgentSystem(store=store, inbox_capacity=2) as system:
        await open_ticket(system)  # its reminder is pending: one place taken
        sent = await system.send(TICKETS, "t1", Escalate(level=1))  # no state takes it now
        assert sent.handle is None or (await sent.handle.result()).ok
        with pytest.raises(InboxFull, match="2"):
            await system.send(TICKETS, "t1", Escalate(level=2))
        assert len(await store.pending("t1")) == 2


async def test_a_timer_fires_on_the_virtual_clock_and_races_a_message_in_due_order(
    store: Store,
) -> None:
    clock = VirtualClock(start=1_000_000.0)
    applied = Applied()
    async with AgentSystem(store=store, clock=clock, listeners=[applied]) as system:
        await open_ticket(system)
        record = await system.stored(TICKETS, "t1").record()
        assert record.wake_at == 1_000_000.0 + 3600
        clock.advance(3599)
        # Sent before the timer is due: applied first.
        sent = await system.send(TICKETS, "t1", Note(text="before"))
        assert sent.handle is not None
        await sent.handle.result()
        clock.advance(10)  # the reminder falls due; a message sent now is due later
        await system.send(TICKETS, "t1", Note(text="after"))
        await applied.wait_for(3)
        state = await system.stored(TICKETS, "t1").state()
        assert state.notes == (
            "opened: printer on fire",
            "before",
            "reminder: check in",
            "after",
        )
        assert (await system.stored(TICKETS, "t1").replay(reexecute=True)).ok


async def test_a_timer_due_while_no_process_served_it_fires_on_recover(tmp_path: Path) -> None:
    path = tmp_path / "timers.db"
    clock = VirtualClock(start=2_000_000.0)
    async with AgentSystem(path=path, clock=clock) as system:
        await open_ticket(system)
    clock.advance(7200)
    async with AgentSystem(path=path, clock=clock) as system:
        woken = await system.recover(TICKETS)
        assert [handle.session_id for handle in woken] == ["t1"]
        result = await woken[0].result()
        assert result.state.notes[-1] == "reminder: check in"
        assert result.exit_reason is ExitReason.WAITING


async def test_a_served_machine_wakes_its_sessions_when_the_clock_passes_a_timer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "served.db"
    clock = VirtualClock(start=3_000_000.0)
    async with AgentSystem(path=path, clock=clock) as system:
        await open_ticket(system)
    applied = Applied()
    async with AgentSystem(
        path=path, clock=clock, machines=[TICKETS], listeners=[applied]
    ) as system:
        clock.advance(3600)
        await applied.wait_for(1)
        assert applied.events[0].info is not None
        assert applied.events[0].info["message"]["kind"] == "remind"


async def test_a_parked_session_holds_no_memory(store: Store) -> None:
    async with AgentSystem(store=store) as system:
        handle = await system.start(TICKETS, Ticket(), session_id="t1")
        session = weakref.ref(session_of(handle))
        assert (await handle.result()).exit_reason is ExitReason.WAITING
        del handle
        for _ in range(100):  # the supervisor's actor finishes stopping after the result
            if session() is None:
                break
            await anyio.lowlevel.checkpoint()
            gc.collect()
        assert session() is None
        assert system.statistics().sessions == 0
        # Reference counting frees this one at once (the loop may not collect at all):
        # collect what earlier tests' sessions left, or it shows here as if alive.
        gc.collect()
        live = [obj for obj in gc.get_objects() if isinstance(obj, Session)]
        assert not [s for s in live if s.session_id == "t1"]


async def test_receiving_needs_a_store() -> None:
    async with AgentSystem(path=None) as system:
        with pytest.raises(ConfigurationError, match="store=MemoryStore"):
            await system.start(TICKETS, Ticket())


def test_two_kinds_of_one_name_are_refused() -> None:
    class Other(BaseModel):
        kind: ClassVar[str] = "note"

    with pytest.raises(ConfigurationError, match="two different message kinds named 'note'"):

        class Confused(Receive[Ticket], accepts=(Note, Other), writes={"notes"}):
            pass

    class Elsewhere(Receive[Ticket], accepts=(Other,), writes={"notes"}):
        def next(self, state: Ticket) -> Phase:
            return Phase.OPEN

    class Here(Receive[Ticket], accepts=(Note,), writes={"notes"}):
        def next(self, state: Ticket) -> Phase:
            return Phase.REVIEW

    with pytest.raises(ConfigurationError, match="two different message kinds are named 'note'"):
        Machine(
            name="confused",
            state_type=Ticket,
            initial=Phase.NEW,
            transitions={
                Phase.NEW: {Phase.OPEN},
                Phase.OPEN: {Phase.REVIEW},
                Phase.REVIEW: {Phase.CLOSED},
            },
            stages={Phase.NEW: opened, Phase.OPEN: Here, Phase.REVIEW: Elsewhere},
            terminal={Phase.CLOSED, Phase.FAILED},
            failed=Phase.FAILED,
        )


def test_a_receive_stage_accepts_pydantic_models_only() -> None:
    with pytest.raises(ConfigurationError, match="not a pydantic model"):

        class Wrong(Receive[Ticket], accepts=(dict,)):  # type: ignore[arg-type]
            pass


def test_show_and_sessions_say_what_a_parked_session_waits_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from arkhon_rheo.cli import main

    db = tmp_path / "t.db"

    async def park() -> None:
        async with AgentSystem(path=db) as system:
            await open_ticket(system)

    anyio.run(park)
    assert main(["show", "t1", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "waits for a message (close_ticket, hold, note, remind) for stage 'triage'" in out
    assert "a timer wakes it at" in out
    assert main(["sessions", "--status", "waiting", "--json", "--store", str(db)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["session_id"] == "t1"
    assert row["waiting"]["accepts"] == ["close_ticket", "hold", "note", "remind"]
    assert row["wake_at"] is not None
    assert main(["show", "t1", "--json", "--store", str(db)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["waits_for"]["kind"] == "message"
