"""Subgraphs: a machine run as a stage of another, as a supervised child session."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Fatal,
    Machine,
    Patch,
    StateView,
    stage,
    subgraph,
)
from arkhon_rheo.errors import SubgraphFailed
from arkhon_rheo.protocols import ErrorClass, EventKind
from arkhon_rheo.supervision import Classifier

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

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
    checked: bool = False
    token: str = ""


class Control:
    """Counts the child's stage runs; can hold the child's second stage until released."""

    def __init__(self, *, block: bool = False) -> None:
        self.block = block
        self.checks = 0
        self.issues = 0
        self.entered = anyio.Event()
        self.release = anyio.Event()


def machines(
    control: Control, output: Callable[[Any, StateView[Any]], Patch] | None = None
) -> tuple[Machine[Main], Machine[Auth]]:
    @stage(reads={"user"}, writes={"checked"}, next=C.ISSUE)
    async def check(view: StateView[Auth]) -> Patch:
        control.checks += 1
        if view.user == "mallory":
            raise Fatal("unknown user")
        return Patch(checked=True)

    @stage(reads={"user", "checked"}, writes={"token"}, next=C.DONE)
    async def issue(view: StateView[Auth]) -> Patch:
        if control.block:
            control.entered.set()
            await control.release.wait()
        control.issues += 1
        return Patch(token=f"token-for-{view.user}")

    child = Machine(
        name="auth",
        state_type=Auth,
        initial=C.CHECK,
        transitions={C.CHECK: {C.ISSUE}, C.ISSUE: {C.DONE}},
        stages={C.CHECK: check, C.ISSUE: issue},
        terminal={C.DONE, C.FAILED},
        failed=C.FAILED,
    )

    @stage(reads={"user"}, writes={"note"}, next=P.AUTH)
    async def greet(view: StateView[Main]) -> Patch:
        return Patch(note=f"hello {view.user}")

    authenticate = subgraph(
        child,
        name="authenticate",
        reads={"user"},
        writes={"token"},
        input=lambda view: Auth(user=view.user),
        output=output or (lambda child, view: Patch(token=child.token)),
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
LINK = {"session_id": "m1", "stage": "authenticate", "seq": 2}


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_child_machine_runs_as_a_stage_and_merges_through_declared_writes(
    where: str, tmp_path: Path
) -> None:
    control = Control()
    parent, _ = machines(control)
    path = None if where == "memory" else tmp_path / "s.db"
    async with AgentSystem(path=path, keep_ended=10) as system:
        result = await system.run(parent, Main(user="alice"), session_id="m1")
        child = system.session(CHILD)
        child_result = await child.result()
        assert system.sessions() == ["m1", CHILD]
        parent_events = await system.session("m1").history()
        child_events = await child.history()
    assert result.ok
    assert result.state.token == "token-for-alice"
    assert result.state.note == "hello alice"
    assert child_result.ok
    assert child_result.state.token == "token-for-alice"
    assert (control.checks, control.issues) == (1, 1)
    # The parent's step records the child run; each child event names the parent step.
    step = result_step(list(parent_events))
    assert step.writes == {"token"}
    (call,) = (step.info or {})["io"]
    assert call["kind"] == "subgraph:authenticate"
    assert call["response"]["session_id"] == CHILD
    assert [(e.stage, (e.info or {})["parent"]) for e in child_events] == [
        ("check", LINK),
        ("issue", LINK),
    ]


def result_step(events: list[Any]) -> Any:
    (step,) = [e for e in events if e.stage == "authenticate"]
    assert step.seq == 2
    return step


async def test_an_output_writing_an_undeclared_field_is_refused() -> None:
    control = Control()
    parent, _ = machines(control, output=lambda child, view: Patch(token="t", note="sneaky"))
    async with AgentSystem(path=None) as system:
        result = await system.run(parent, Main(user="alice"), session_id="m1")
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "UndeclaredWrite"
    assert result.state.note == "hello alice"  # nothing of the refused patch was merged
    assert result.state.token == ""


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_a_failing_child_fails_the_parent_stage_with_a_classified_error(
    where: str, tmp_path: Path
) -> None:
    parent, _ = machines(Control())
    path = None if where == "memory" else tmp_path / "s.db"
    async with AgentSystem(path=path, keep_ended=10) as system:
        result = await system.run(parent, Main(user="mallory"), session_id="m1")
        child_result = await system.session(CHILD).result()
    assert child_result.exit_reason is ExitReason.FAILED
    assert child_result.failure is not None
    assert child_result.failure.message == "unknown user"
    # Recoverable: recorded in last_error, and the error route led to DENIED.
    assert result.state.lifecycle is P.DENIED
    error = result.state.last_error
    assert error is not None
    assert error.error_type == "SubgraphFailed"
    assert error.error_class is ErrorClass.RECOVERABLE
    assert CHILD in error.message
    assert "Fatal: unknown user" in error.message


async def test_the_error_carries_the_childs_failure_record() -> None:
    seen: list[Exception] = []

    class Capture(Classifier):
        def classify(self, exc: Exception) -> ErrorClass:
            seen.append(exc)
            return super().classify(exc)

    parent, _ = machines(Control())
    async with AgentSystem(path=None, classifier=Capture()) as system:
        await system.run(parent, Main(user="mallory"), session_id="m1")
        child_failure = (await system.session(CHILD).result()).failure
    errors = [exc for exc in seen if isinstance(exc, SubgraphFailed)]
    assert len(errors) == 1
    (error,) = errors
    assert error.session_id == CHILD
    assert error.exit_reason == "failed"
    assert error.failure == child_failure
    assert error.stage == "authenticate"


async def test_history_links_child_events_to_the_parent_step(tmp_path: Path) -> None:
    parent, child = machines(Control())
    async with AgentSystem(path=tmp_path / "s.db") as system:
        await system.run(parent, Main(user="alice"), session_id="m1")
        flat = await system.stored(parent, "m1").history()
        tree = await system.stored(parent, "m1").history(children=True)
        child_events = await system.stored(child, CHILD).history()
    assert [(e.session_id, e.seq) for e in flat] == [("m1", 1), ("m1", 2)]
    assert [(e.session_id, e.seq, e.stage) for e in tree] == [
        ("m1", 1, "greet"),
        (CHILD, 1, "check"),
        (CHILD, 2, "issue"),
        ("m1", 2, "authenticate"),
    ]
    assert all((e.info or {}).get("parent") == LINK for e in child_events)
    assert tree[1:3] == child_events


async def test_a_resumed_parent_continues_its_child_in_flight(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    control = Control(block=True)
    parent, child = machines(control)
    async with AgentSystem(path=db) as system:
        await system.start(parent, Main(user="alice"), session_id="m1")
        await control.entered.wait()  # the child committed "check" and waits in "issue"
        # Leaving the block cancels both sessions mid-step, as a crash would stop them.
    control.release.set()
    async with AgentSystem(path=db) as system:
        assert system.store is not None
        handle = await system.resume(parent, "m1")
        result = await handle.result()
        runs = (control.checks, control.issues)
        ids = [record.session_id for record in await system.store.sessions()]
        child_events = await system.stored(child, CHILD).history()
        report = await system.stored(parent, "m1").replay()
        reexecuted = await system.stored(parent, "m1").replay(reexecute=True)
        after_replay = (control.checks, control.issues)
    assert result.ok
    assert result.state.token == "token-for-alice"
    assert ids == ["m1", CHILD]  # the same child went on: no second one
    # The child's log: its committed step, its resume (recorded), its next step.
    assert [e.stage for e in child_events] == ["check", None, "issue"]
    assert child_events[1].kind is EventKind.RESUME
    assert runs == (1, 1)  # its committed step did not run again
    assert report.ok
    assert reexecuted.ok
    assert reexecuted.reexecuted == 2
    assert after_replay == runs  # re-executing the parent did not rerun the child


async def test_a_parent_resumed_after_its_child_ended_takes_the_stored_result(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    control = Control(block=True)
    parent, child = machines(control)
    async with AgentSystem(path=db) as system:
        await system.start(parent, Main(user="alice"), session_id="m1")
        await control.entered.wait()
    control.release.set()
    async with AgentSystem(path=db) as system:
        # The child ends while its parent is down: the parent never committed its result.
        assert (await (await system.resume(child, CHILD)).result()).ok
    assert control.issues == 1
    async with AgentSystem(path=db, keep_ended=10) as system:
        result = await (await system.resume(parent, "m1")).result()
        assert system.sessions() == ["m1"]  # no child ran in this system
    assert result.ok
    assert result.state.token == "token-for-alice"
    assert (control.checks, control.issues) == (1, 1)  # answered from the stored child


async def test_a_subgraph_stage_outside_a_session_has_no_system_to_run_in() -> None:
    parent, _ = machines(Control())
    authenticate = parent.stages[P.AUTH]()
    view: StateView[Main] = StateView(Main(user="alice"), authenticate.reads, "authenticate")
    with pytest.raises(ConfigurationError, match="outside a session there is none"):
        await authenticate.execute(view)


async def test_subgraph_checks_its_machine() -> None:
    with pytest.raises(ConfigurationError, match="must be a Machine"):
        subgraph(
            object(),  # type: ignore[arg-type]
            name="bad",
            input=lambda view: Auth(),
            output=lambda child, view: Patch(),
            next=P.DONE,
        )


class Top(enum.Enum):
    RUN = "run"
    DONE = "done"
    FAILED = "failed"


class Outer(AgentState):
    lifecycle: Top = Top.RUN
    user: str = ""
    token: str = ""


async def test_subgraphs_nest(tmp_path: Path) -> None:
    parent, _ = machines(Control())
    inner = subgraph(
        parent,
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
    async with AgentSystem(path=tmp_path / "s.db") as system:
        result = await system.run(outer, Outer(user="bob"), session_id="o1")
        tree = await system.stored(outer, "o1").history(children=True)
    assert result.ok
    assert result.state.token == "token-for-bob"
    assert [(e.session_id, e.stage) for e in tree] == [
        ("o1/inner/1", "greet"),
        ("o1/inner/1/authenticate/2", "check"),
        ("o1/inner/1/authenticate/2", "issue"),
        ("o1/inner/1", "authenticate"),
        ("o1", "inner"),
    ]
    assert (tree[1].info or {})["parent"] == {
        "session_id": "o1/inner/1",
        "stage": "authenticate",
        "seq": 2,
    }
