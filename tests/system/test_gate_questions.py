"""Gates ask questions and type their answers; decisions are messages through the inbox."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, ExitReason, MemoryStore, SessionError
from arkhon_rheo.errors import MessageRefused
from arkhon_rheo.protocols import Abort, Approve, Edit, EventKind, Gate
from tests.system.test_pauses import Order, order_machine

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def asking(question: Any = None) -> Any:
    return order_machine(
        Gate.before(
            "ship",
            field="approved",
            question=question if question is not None else (lambda s: {"ship": s.item}),
            answer=bool,
        )
    )


async def test_a_gate_asks_its_question_and_refuses_an_answer_of_another_type(
    tmp_path: Path,
) -> None:
    machine = asking()
    async with AgentSystem(path=tmp_path / "q.db") as system:
        paused = await system.run(machine, Order(item="book"), session_id="q1")
        assert paused.exit_reason is ExitReason.PAUSED
        record = await system.stored(machine, "q1").record()
        assert record.status == "paused"
        assert record.waiting is not None
        assert record.waiting["gate"] == "before ship"
        assert record.waiting["question"] == {"ship": "book"}
        assert record.waiting["field"] == "approved"
        assert record.waiting["answer"] == {"type": "boolean"}
        (pause,) = [
            e for e in await system.stored(machine, "q1").history() if e.kind is EventKind.PAUSE
        ]
        assert pause.info is not None
        assert pause.info["question"] == {"ship": "book"}

        with pytest.raises(MessageRefused, match="takes an answer of type"):
            await system.stored(machine, "q1").approve("maybe")
        with pytest.raises(MessageRefused, match="takes an answer of type"):
            await system.send(machine, "q1", {"kind": "approve", "value": [1]})
        assert await system.store.messages("q1") == ()  # type: ignore[union-attr]
        assert (await system.stored(machine, "q1").record()).last_seq == record.last_seq

        sent = await system.send(machine, "q1", Approve(value="true"), message_id="ok-1")
        assert sent.handle is not None
        done = await sent.handle.result()
        assert done.ok
        assert done.state.approved is True  # the answer, as its type
        history = await system.stored(machine, "q1").history()
        decision = [e for e in history if e.kind is EventKind.DECISION]
        assert decision[0].info is not None
        assert decision[0].info["message"]["kind"] == "approve"
        assert decision[0].info["message"]["id"] == "ok-1"
        again = await system.send(machine, "q1", Approve(value=True), message_id="ok-1")
        assert again.duplicate
        assert again.handle is None
        report = await system.stored(machine, "q1").replay()
        assert report.ok, report.divergence


async def test_edit_and_abort_are_messages_too() -> None:
    machine = asking()
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        await system.run(machine, Order(item="book"), session_id="q2")
        await system.send(machine, "q2", Edit(fields={"item": "atlas"}))
        record = await system.stored(machine, "q2").record()
        assert record.status == "paused"  # an edit leaves it paused, still asking
        assert (await system.stored(machine, "q2").state()).item == "atlas"
        sent = await system.send(machine, "q2", {"kind": "abort"})
        assert sent.handle is None
        assert (await system.stored(machine, "q2").record()).status == "aborted"
        kinds = [m.kind for m in await store.messages("q2")]
        assert kinds == ["edit", "abort"]
        assert await store.pending("q2") == ()
        with pytest.raises(SessionError, match="not paused"):
            await system.send(machine, "q2", Abort())


async def test_a_broken_question_still_pauses_and_says_so() -> None:
    def broken(state: Order) -> Any:
        raise RuntimeError("no question today")

    machine = asking(broken)
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        paused = await system.run(machine, Order(item="book"), session_id="q3")
        assert paused.exit_reason is ExitReason.PAUSED
        record = await store.record("q3")
        assert record.waiting is not None
        assert "no question today" in record.waiting["question"]


async def test_an_answer_type_is_checked_without_a_store_too() -> None:
    machine = asking()
    async with AgentSystem(path=None) as system:
        await system.run(machine, Order(item="book"), session_id="q4")
        with pytest.raises(MessageRefused, match="takes an answer of type"):
            await system.stored(machine, "q4").approve({"no": 1})
        handle = await system.stored(machine, "q4").approve(True)
        assert (await handle.result()).ok


def test_an_answer_type_needs_a_field() -> None:
    with pytest.raises(ConfigurationError, match="no field to write it to"):
        Gate.before("ship", answer=bool)


def test_show_and_sessions_say_what_a_paused_session_asks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import anyio

    from arkhon_rheo.cli import main

    db = tmp_path / "q.db"

    async def pause() -> None:
        async with AgentSystem(path=db) as system:
            await system.run(asking(), Order(item="book"), session_id="q5")

    anyio.run(pause)
    assert main(["show", "q5", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "waits for a decision at gate 'before ship', before stage 'ship'" in out
    assert "asking {'ship': 'book'}; approve writes field 'approved'" in out
    assert main(["sessions", "--status", "paused", "--json", "--store", str(db)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["waiting"]["question"] == {"ship": "book"}
    assert row["waits_for"].startswith("a decision at gate 'before ship'")
    assert row["orphaned"] is False
