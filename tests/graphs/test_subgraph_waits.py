"""A child session that waits (at a gate, for a message) parks its parent until it ends."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from pydantic import BaseModel

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ExitReason,
    Gate,
    Machine,
    MemoryStore,
    Patch,
    SQLiteStore,
    StateView,
    stage,
    subgraph,
)
from arkhon_rheo.protocols import EventKind, Receive
from arkhon_rheo.session import _subgraph as subgraphs
from arkhon_rheo.store import PostgresStore
from arkhon_rheo.system import Worker

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Store


pytestmark = pytest.mark.anyio


class P(enum.Enum):
    START = "start"
    AUTH = "auth"
    DONE = "done"
    DENIED = "denied"
    FAILED = "failed"


class C(enum.Enum):
    CHECK = "check"
    ISSUE = "issue"
    DONE = "done"
    FAILED = "failed"


class Main(AgentState):
    lifecycle: P = P.START
    user: str = ""
    note: str = ""
    token: str = ""


class Auth(AgentState):
    lifecycle: C = C.CHECK
    user: str = ""
    approved: bool = False
    code: str = ""
    token: str = ""


class Code(BaseModel):  # the message a child waiting for one takes
    code: str


class Runs:
    """Counts the stage runs of both machines."""

    def __init__(self) -> None:
        self.greets = 0
        self.checks = 0
        self.issues = 0


def machines(runs: Runs, *, waits: str) -> tuple[Machine[Main], Machine[Auth]]:
    """A parent whose subgraph stage runs a child that pauses at a gate or waits for a message."""

    @stage(reads={"user"}, writes=(), next=C.ISSUE)
    async def check(view: StateView[Auth]) -> Patch:
        runs.checks += 1
        return Patch()

    @stage(reads={"user", "approved"}, writes={"token"}, next=C.DONE)
    async def issue(view: StateView[Auth]) -> Patch:
        runs.issues += 1
        return Patch(token=f"token-for-{view.user}-{view.approved}")

    class TakeCode(Receive[Auth], reads={"user"}, writes={"code", "token"}, accepts=(Code,)):
        async def apply(self, view: StateView[Auth], message: Code) -> Patch:
            runs.issues += 1
            return Patch(code=message.code, token=f"token-for-{view.user}-{message.code}")

        def next(self, state: Auth) -> C:
            return C.DONE

    gated = waits == "gate"
    child = Machine(
        name="auth",
        state_type=Auth,
        initial=C.CHECK,
        transitions={C.CHECK: {C.ISSUE}, C.ISSUE: {C.DONE}},
        stages={C.CHECK: check, C.ISSUE: issue if gated else TakeCode},
        terminal={C.DONE, C.FAILED},
        failed=C.FAILED,
        gates=[Gate.before("issue", field="approved", answer=bool)] if gated else [],
    )

    @stage(reads={"user"}, writes={"note"}, next=P.AUTH)
    async def greet(view: StateView[Main]) -> Patch:
        runs.greets += 1
        return Patch(note=f"hello {view.user}")

    authenticate = subgraph(
        child,
        name="authenticate",
        reads={"user"},
        writes={"token"},
        input=lambda view: Auth(user=view.user),
        output=lambda child, view: Patch(token=child.token),
        next=P.DONE,
    )
    parent = Machine(
        name="main",
        state_type=Main,
        initial=P.START,
        transitions={P.START: {P.AUTH}, P.AUTH: {P.DONE, P.DENIED}},
        stages={P.START: greet, P.AUTH: authenticate},
        terminal={P.DONE, P.DENIED, P.FAILED},
        failed=P.FAILED,
        error_routes={P.AUTH: P.DENIED},
    )
    return parent, child


CHILD = "m1/authenticate/2"  # the parent's id, the stage, the parent event's number


async def wake_child(system: AgentSystem, child: Machine[Auth], waits: str) -> Any:
    """Answer the waiting child by its id: approve its gate, or send it its message."""
    if waits == "gate":
        return await system.stored(child, CHILD).approve(True)
    sent = await system.send(child, CHILD, Code(code="c-7"))
    return sent.handle


def token(waits: str) -> str:
    return "token-for-alice-True" if waits == "gate" else "token-for-alice-c-7"


@pytest.mark.parametrize("waits", ["gate", "message"])
@pytest.mark.parametrize("where", ["sqlite", "memory-store", "postgres"])
async def test_a_waiting_child_parks_its_parent_and_its_answer_wakes_both(
    where: str, waits: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    runs = Runs()
    parent, child = machines(runs, waits=waits)
    async with MemoryStore() as memory:
        store: Any = memory if where == "memory-store" else str(tmp_path / "s.db")
        if where == "postgres":
            store = request.getfixturevalue("postgres_url")
        async with AgentSystem(store=store, keep_ended=10) as system:
            parked = await system.run(parent, Main(user="alice"), session_id="m1")
            record = await system.stored(parent, "m1").record()
            child_record = await system.stored(child, CHILD).record()
            handle = await wake_child(system, child, waits)
            assert handle is not None
            child_result = await handle.result()
            # The parent woke as the child ran on: its step awaits the child's run here.
            result = await system.session("m1").result()
            events = await system.stored(parent, "m1").history()
            pending = await system.store.pending("m1")  # type: ignore[union-attr]
    assert parked.exit_reason is ExitReason.WAITING
    assert record.status == "waiting"
    assert record.waiting["child"] == CHILD
    assert record.waiting["stage"] == "authenticate"
    assert child_record.status == ("paused" if waits == "gate" else "waiting")
    assert child_result.ok
    assert result.ok
    assert result.state.token == token(waits)
    assert (runs.greets, runs.checks, runs.issues) == (1, 1, 1)
    # No event for the park; the step that took the child's result applied its end.
    assert [(e.seq, e.kind, e.stage) for e in events] == [
        (1, EventKind.STEP, "greet"),
        (2, EventKind.STEP, "authenticate"),
    ]
    assert (events[1].info or {})["child_ended"] == {"child": CHILD, "exit_reason": "finished"}
    assert pending == ()


@pytest.mark.parametrize("waits", ["gate", "message"])
async def test_a_restart_between_the_childs_pause_and_its_answer(
    waits: str, tmp_path: Path
) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    parent, child = machines(runs, waits=waits)
    async with AgentSystem(path=db) as system:
        parked = await system.run(parent, Main(user="alice"), session_id="m1")
    assert parked.exit_reason is ExitReason.WAITING
    # Another process: it serves the parent's machine, and answers the child by its id.
    async with AgentSystem(path=db, machines=[parent], keep_ended=10) as system:
        handle = await wake_child(system, child, waits)
        child_result = await handle.result()
        result = await system.session("m1").result()
        ran = (runs.greets, runs.checks, runs.issues)
        child_events = await system.stored(child, CHILD).history()
        tree = await system.stored(parent, "m1").history(children=True)
        report = await system.stored(parent, "m1").replay(reexecute=True)
        child_report = await system.stored(child, CHILD).replay()
    assert child_result.ok
    assert result.ok
    assert result.state.token == token(waits)
    assert ran == (1, 1, 1)
    link = {"session_id": "m1", "stage": "authenticate", "seq": 2}
    assert all((e.info or {}).get("parent") == link for e in child_events)
    # The pair's history: the child's events (its wait, its answer) before the parent's step.
    assert [(e.session_id, e.stage) for e in tree][-1] == ("m1", "authenticate")
    assert {e.session_id for e in tree[1:-1]} == {CHILD}
    assert report.ok
    assert report.reexecuted == 2
    assert child_report.ok
    assert runs.issues == 1  # re-executing the parent did not run its child again


async def test_a_parent_whose_machine_is_not_served_wakes_where_it_is(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    async with AgentSystem(path=db) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
    async with AgentSystem(path=db) as system:  # knows only the child's machine
        handle = await system.stored(child, CHILD).approve(True)
        assert (await handle.result()).ok
        assert system.store is not None
        record = await system.store.record("m1")
        due, _ = await system.store.waking(record.wake_at or 0.0)
    assert record.status == "waiting"
    assert record.wake_at is not None  # the child's end made it due
    assert [r.session_id for r in due] == ["m1"]
    async with AgentSystem(path=db) as system:  # a system serving the parent wakes it
        (woken,) = await system.recover(parent)
        result = await woken.result()
        pending = await system.store.pending("m1")  # type: ignore[union-attr]
    assert result.ok
    assert result.state.token == "token-for-alice-True"
    assert pending == ()


async def test_an_aborted_child_fails_its_parents_step(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    async with AgentSystem(path=db) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
    async with AgentSystem(path=db, machines=[parent], keep_ended=10) as system:
        await system.stored(child, CHILD).abort()
        result = await system.session("m1").result()
        pending = await system.store.pending("m1")  # type: ignore[union-attr]
        events = await system.stored(parent, "m1").history()
    assert result.state.lifecycle is P.DENIED  # the error route of a failed child
    assert result.state.last_error is not None
    assert result.state.last_error.error_type == "SubgraphFailed"
    assert "aborted" in result.state.last_error.message
    assert pending == ()
    assert events[-1].kind is EventKind.FAILURE
    assert (events[-1].info or {})["child_ended"]["exit_reason"] == "aborted"


async def test_a_child_that_pauses_twice_keeps_its_parent_parked(tmp_path: Path) -> None:
    runs = Runs()
    _, child = machines(runs, waits="gate")
    twice = Machine(
        name=child.name,
        state_type=Auth,
        initial=C.CHECK,
        transitions=child.transitions,
        stages=child.stages,
        terminal=child.terminal,
        failed=child.failed,
        gates=[Gate.before("check"), Gate.before("issue", field="approved", answer=bool)],
    )
    parent = subgraph_parent(twice)
    async with AgentSystem(path=tmp_path / "s.db", keep_ended=10) as system:
        await system.run(parent, Main(lifecycle=P.AUTH, user="alice"), session_id="m1")
        first = await system.stored(twice, "m1/authenticate/1").approve()
        assert (await first.result()).exit_reason is ExitReason.PAUSED
        # The parent woke, found its child paused again, and parked again.
        again = await system.session("m1").result()
        record = await system.stored(parent, "m1").record()
        second = await system.stored(twice, "m1/authenticate/1").approve(True)
        assert (await second.result()).ok
        result = await system.session("m1").result()
    assert again.exit_reason is ExitReason.WAITING
    assert record.waiting["child"] == "m1/authenticate/1"
    assert result.ok
    assert result.state.token == "token-for-alice-True"


def subgraph_parent(child: Machine[Auth]) -> Machine[Main]:
    """A parent whose only stage runs ``child``."""
    authenticate = subgraph(
        child,
        name="authenticate",
        reads={"user"},
        writes={"token"},
        input=lambda view: Auth(user=view.user),
        output=lambda child, view: Patch(token=child.token),
        next=P.DONE,
    )
    return Machine(
        name="main",
        state_type=Main,
        initial=P.AUTH,
        transitions={P.AUTH: {P.DONE}},
        stages={P.AUTH: authenticate},
        terminal={P.DONE, P.FAILED},
        failed=P.FAILED,
    )


async def test_a_fork_of_the_parked_parent_runs_a_child_of_its_own(tmp_path: Path) -> None:
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    async with AgentSystem(path=tmp_path / "s.db", keep_ended=10) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
        fork = await system.stored(parent, "m1").fork(new_id="f1")
        forked = await (await fork.resume()).result()
        fork_child = forked.state  # it parked on a child of its own
        record = await fork.record()
        original = await system.stored(child, CHILD).record()
        await (await system.stored(child, CHILD).approve(True)).result()
        result = await system.session("m1").result()
    assert forked.exit_reason is ExitReason.WAITING
    assert fork_child.token == ""
    assert record.waiting["child"].startswith("f1/authenticate/")
    assert original.status == "paused"  # the fork left the original's child alone
    assert result.ok


async def test_without_a_store_a_waiting_child_still_fails_the_parent_step() -> None:
    runs = Runs()
    parent, _ = machines(runs, waits="gate")
    async with AgentSystem(path=None) as system:
        result = await system.run(parent, Main(user="alice"), session_id="m1")
    assert result.state.lifecycle is P.DENIED
    assert result.state.last_error is not None
    assert "paused" in result.state.last_error.message


@pytest.mark.parametrize("where", ["memory", "sqlite", "postgres"])
async def test_a_worker_parks_the_parent_and_wakes_it_at_its_childs_end(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    store: Store = MemoryStore() if where == "memory" else SQLiteStore(tmp_path / "s.db")
    if where == "postgres":
        store = PostgresStore(request.getfixturevalue("postgres_url"))
    worker = Worker(store, [parent, child], poll_interval=0.05)
    async with store, AgentSystem(store=store) as client, anyio.create_task_group() as group:
        group.start_soon(worker.run)
        await client.submit(parent, Main(user="alice"), session_id="m1")
        await until(store, {"m1": "waiting"})
        record = await store.record("m1")
        child_id = record.waiting["child"]  # the worker's claim was the parent's first event
        assert (await store.record(child_id)).status == "paused"
        # The client answers the child (it runs here); the worker wakes the parent.
        handle = await client.stored(child, child_id).approve(True)
        assert (await handle.result()).ok
        await until(store, {"m1": "finished"})
        worker.drain()
        state = await client.stored(parent, "m1").state()
        pending = await store.pending("m1")
    assert child_id == "m1/authenticate/3"
    assert state.token == "token-for-alice-True"
    assert pending == ()
    assert (runs.greets, runs.checks, runs.issues) == (1, 1, 1)


async def until(store: Store, statuses: dict[str, str]) -> None:
    """Wait until each session has its status in ``statuses`` (read from the store)."""
    with anyio.fail_after(30):
        while True:
            records = {r.session_id: r.status for r in await store.sessions()}
            if all(records.get(sid) == status for sid, status in statuses.items()):
                return
            await anyio.sleep(0.01)


async def test_recover_posts_a_childs_end_its_process_died_before_posting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    async with AgentSystem(path=db) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
    with monkeypatch.context() as patch:  # the child's process dies after its last commit
        patch.setattr(subgraphs, "post_child_end", _never_posted)
        async with AgentSystem(path=db) as system:
            assert (await (await system.stored(child, CHILD).approve(True)).result()).ok
            record = await system.stored(parent, "m1").record()
    assert (record.status, record.wake_at) == ("waiting", None)  # nothing wakes it
    async with AgentSystem(path=db) as system:
        (woken,) = await system.recover(parent)
        result = await woken.result()
    assert result.ok
    assert result.state.token == "token-for-alice-True"


async def _never_posted(*args: object) -> None:
    return None


async def test_a_parent_past_its_own_gate_is_not_paused_there_again_when_it_wakes(
    tmp_path: Path,
) -> None:
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    gated = Machine(
        name=parent.name,
        state_type=Main,
        initial=parent.initial,
        transitions=parent.transitions,
        stages=parent.stages,
        terminal=parent.terminal,
        failed=parent.failed,
        error_routes=parent.error_routes,
        gates=[Gate.before("authenticate")],
    )
    async with AgentSystem(path=tmp_path / "s.db", keep_ended=10) as system:
        paused = await system.run(gated, Main(user="alice"), session_id="m1")
        parked = await (await system.stored(gated, "m1").approve()).result()
        resumed = await (await system.resume(gated, "m1")).result()  # by hand: parks again
        child_id = (await system.stored(gated, "m1").record()).waiting["child"]
        handle = await system.stored(child, child_id).approve(True)
        assert (await handle.result()).ok
        result = await system.session("m1").result()
        pauses = [e for e in await system.stored(gated, "m1").history() if e.kind.value == "pause"]
    assert paused.exit_reason is ExitReason.PAUSED
    assert parked.exit_reason is ExitReason.WAITING
    assert resumed.exit_reason is ExitReason.WAITING
    assert child_id == "m1/authenticate/4"  # after its pause and the decision
    assert result.ok
    assert len(pauses) == 1


async def test_an_ask_to_the_waiting_child_is_answered_and_wakes_the_parent(
    tmp_path: Path,
) -> None:
    runs = Runs()
    parent, child = machines(runs, waits="message")
    async with AgentSystem(path=tmp_path / "s.db", keep_ended=10) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
        reply = await system.ask(child, CHILD, Code(code="c-7"), timeout=10)
        result = await system.session("m1").result()
    assert reply.state.token == "token-for-alice-c-7"
    assert result.ok
    assert result.state.token == "token-for-alice-c-7"


class Top(enum.Enum):
    RUN = "run"
    DONE = "done"
    FAILED = "failed"


class Outer(AgentState):
    lifecycle: Top = Top.RUN
    user: str = ""
    token: str = ""


@pytest.mark.parametrize("restart", [False, True])
async def test_a_grandchild_that_waits_parks_both_ancestors(restart: bool, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    middle, child = machines(runs, waits="gate")
    inner = subgraph(
        middle,
        name="inner",
        reads={"user"},
        writes={"token"},
        input=lambda view: Main(user=view.user),
        output=lambda child, view: Patch(token=child.token),
        next=Top.DONE,
    )
    outer = Machine(
        name="outer",
        state_type=Outer,
        initial=Top.RUN,
        transitions={Top.RUN: {Top.DONE}},
        stages={Top.RUN: inner},
        terminal={Top.DONE, Top.FAILED},
        failed=Top.FAILED,
    )
    grandchild = "o1/inner/1/authenticate/2"
    async with AgentSystem(path=db, keep_ended=10) as system:
        parked = await system.run(outer, Outer(user="bob"), session_id="o1")
        records = [
            await system.stored(outer, "o1").record(),
            await system.stored(middle, "o1/inner/1").record(),
        ]
        if not restart:
            await (await system.stored(child, grandchild).approve(True)).result()
            result = await system.session("o1").result()
    if restart:  # the outer machine served: the machines of its subgraphs are too
        async with AgentSystem(path=db, machines=[outer], keep_ended=10) as system:
            await (await system.stored(child, grandchild).approve(True)).result()
            result = await system.session("o1").result()
    assert parked.exit_reason is ExitReason.WAITING
    assert [r.waiting["child"] for r in records] == ["o1/inner/1", grandchild]
    assert result.ok
    assert result.state.token == "token-for-bob-True"


async def test_a_child_stopped_after_its_decision_is_resumed_and_its_parent_follows(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    entered, release = anyio.Event(), anyio.Event()

    @stage(reads={"user", "approved"}, writes={"token"}, next=C.DONE, name="issue")
    async def slow_issue(view: StateView[Auth]) -> Patch:
        entered.set()
        await release.wait()
        runs.issues += 1
        return Patch(token=f"token-for-{view.user}-{view.approved}")

    _, gated = machines(runs, waits="gate")
    child = Machine(
        name=gated.name,
        state_type=Auth,
        initial=C.CHECK,
        transitions=gated.transitions,
        stages={C.CHECK: gated.stages[C.CHECK], C.ISSUE: slow_issue},
        terminal=gated.terminal,
        failed=gated.failed,
        gates=gated.gates,
    )
    parent = subgraph_parent(child)
    async with AgentSystem(path=db) as system:
        await system.run(parent, Main(lifecycle=P.AUTH, user="alice"), session_id="m1")
    child_id = "m1/authenticate/1"
    async with AgentSystem(path=db) as system:  # the child runs on, then its process stops
        await system.stored(child, child_id).approve(True)
        await entered.wait()
    release.set()
    async with AgentSystem(path=db, machines=[parent], keep_ended=10) as system:
        stopped = await system.stored(child, child_id).record()
        handle = await system.resume(child, child_id)  # its parent, served here, follows it
        # A resumed run meets the gate before the stage it stopped in again (as any gated
        # session does): the parent, woken with it, parks again; the next approval ends both.
        assert (await handle.result()).exit_reason is ExitReason.PAUSED
        again = await system.session("m1").result()
        handle = await system.stored(child, child_id).approve(True)
        assert (await handle.result()).ok
        result = await system.session("m1").result()
    assert stopped.status == "cancelled"
    assert again.exit_reason is ExitReason.WAITING
    assert result.ok
    assert result.state.token == "token-for-alice-True"
    assert runs.issues == 1


async def test_a_worker_posts_a_childs_end_its_process_died_before_posting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    runs = Runs()
    parent, child = machines(runs, waits="gate")
    async with AgentSystem(path=db) as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
    with monkeypatch.context() as patch:  # the child's process dies after its last commit
        patch.setattr(subgraphs, "post_child_end", _never_posted)
        async with AgentSystem(path=db) as system:
            assert (await (await system.stored(child, CHILD).approve(True)).result()).ok
    async with SQLiteStore(db) as store, anyio.create_task_group() as group:
        worker = Worker(store, [parent], poll_interval=0.05)
        group.start_soon(worker.run)
        await until(store, {"m1": "finished"})
        worker.drain()
