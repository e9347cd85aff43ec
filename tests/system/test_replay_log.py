"""Replaying a stored log: digests per event, damage found, stages re-executed on recorded calls."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    History,
    Lifecycle,
    Machine,
    Patch,
    SessionNotFound,
    StateView,
    record_call,
    recorded,
    stage,
)
from arkhon_rheo.errors import RecordedCallFailed, ReplayDiverged, UnrecordableCall
from arkhon_rheo.protocols import EventKind, Gate
from arkhon_rheo.session._recording import CallPlayback, CallRecorder
from tests.support.store_rows import event_patch, set_event, snapshot_state

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.anyio

L = Lifecycle


class Reply(BaseModel):
    text: str
    numbers: tuple[int, int]


class Research(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    question: str = "add things"
    thoughts: History[str] = History()
    sums: History[int] = History()
    note: str = ""


class Model:
    """A scripted model; offline, it fails the test if anything calls it."""

    def __init__(self, *, offline: bool = False) -> None:
        self.offline = offline
        self.calls = 0

    async def complete(self, prompt: str) -> Reply:
        if self.offline:
            raise AssertionError("the model was called during a replay")
        self.calls += 1
        return Reply(text=f"reply {self.calls} to {prompt}", numbers=(self.calls, 10))


class Tools:
    def __init__(self, *, offline: bool = False) -> None:
        self.offline = offline

    @recorded("tool:add")
    async def add(self, a: int, b: int) -> int:
        if self.offline:
            raise AssertionError("a tool was called during a replay")
        return a + b

    @recorded("tool:divide")
    async def divide(self, a: int, b: int) -> float:
        if self.offline:
            raise AssertionError("a tool was called during a replay")
        return a / b


def research_machine(
    model: Model,
    tools: Tools,
    *,
    prompt: str = "think about {n}",
    skip_tool: bool = False,
    bonus: int = 0,
    gates: tuple[Gate, ...] = (),
) -> Machine[Research]:
    @stage(reads=(), writes={"note"}, next=L.THINKING)
    async def begin(view: StateView[Research]) -> Patch:
        return Patch(note="begun")

    @stage(reads={"question", "thoughts"}, writes={"thoughts"}, next=L.ACTING)
    async def think(view: StateView[Research]) -> Patch:
        text = prompt.format(n=len(view.thoughts))
        reply = await record_call(
            "model", {"prompt": text}, lambda: model.complete(text), returns=Reply
        )
        assert isinstance(reply, Reply)  # typed back from the record in a replay
        return Patch().append("thoughts", reply.text)

    @stage(reads={"thoughts"}, writes={"sums", "note"}, next=L.OBSERVING)
    async def act(view: StateView[Research]) -> Patch:
        a = len(view.thoughts)
        total = 0 if skip_tool else await tools.add(a, 10)
        try:
            await tools.divide(a, 0)
            note = "divided"
        except ZeroDivisionError as exc:  # rebuilt as itself in a replay
            note = f"caught {type(exc).__name__}"
        return Patch(note=note).append("sums", total + bonus)

    def after(state: Research) -> Lifecycle:
        return L.FINISHED if len(state.sums) >= 2 else L.THINKING

    @stage(reads={"sums"}, writes=(), next=after)
    async def observe(view: StateView[Research]) -> Patch:
        return Patch()

    return Machine(
        name="research",
        state_type=Research,
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
        stages={L.INITIALIZED: begin, L.THINKING: think, L.ACTING: act, L.OBSERVING: observe},
        gates=gates,
    )


async def recorded_run(session_id: str = "r1", **system: Any) -> Research:
    machine = research_machine(Model(), Tools())
    async with AgentSystem(**system) as agents:
        result = await agents.run(machine, Research(), session_id=session_id)
    assert result.ok, result.failure
    assert isinstance(result.state, Research)
    return result.state


def offline_machine(**changes: Any) -> Machine[Research]:
    return research_machine(Model(offline=True), Tools(offline=True), **changes)


def db(path: str = "arkhon-rheo.db") -> sqlite3.Connection:
    return sqlite3.connect(Path(path), isolation_level=None)


async def test_the_calls_of_each_step_are_recorded_in_its_event() -> None:
    await recorded_run()
    async with AgentSystem() as agents:
        history = await agents.stored(offline_machine(), "r1").history()
    think, act = history[1], history[2]
    assert think.stage == "think"
    assert think.info == {
        "io": [
            {
                "kind": "model",
                "request": {"prompt": "think about 0"},
                "response": {"text": "reply 1 to think about 0", "numbers": [1, 10]},
            }
        ]
    }
    assert act.info is not None
    assert act.info["io"] == [
        {"kind": "tool:add", "request": {"a": 1, "b": 10}, "response": 11},
        {
            "kind": "tool:divide",
            "request": {"a": 1, "b": 0},
            "error": {
                "type": "builtins.ZeroDivisionError",
                "message": "division by zero",
                "args": ["division by zero"],
            },
        },
    ]
    assert history[0].info is None  # a stage without calls records nothing


async def test_a_clean_log_replays_to_the_stored_state_without_a_model() -> None:
    state = await recorded_run(snapshot_every=3)
    machine = offline_machine()
    async with AgentSystem(snapshot_every=3) as agents:
        report = await agents.stored(machine, "r1").replay()
        again = await agents.stored(machine, "r1").replay(reexecute=True)
        history = await agents.stored(machine, "r1").history()
    assert report.ok, report.divergence
    assert report.events == len(history) == 7
    assert report.state == state
    assert again.ok, again.divergence
    assert again.reexecuted == sum(event.kind is EventKind.STEP for event in history)
    assert again.state == state
    assert again.digest == report.digest


async def test_rollbacks_decisions_and_forks_replay_too() -> None:
    machine = research_machine(Model(), Tools(), gates=(Gate.before("act"),))
    async with AgentSystem(snapshot_every=2) as agents:
        first = await agents.run(machine, Research(), session_id="g1")
        assert first.exit_reason is ExitReason.PAUSED
        await agents.stored(machine, "g1").edit({"note": "edited by a human"})
        handle = await agents.stored(machine, "g1").approve()
        assert handle is not None
        second = await handle.result()
        assert second.exit_reason is ExitReason.PAUSED  # the gate guards every act
        await agents.stored(machine, "g1").rollback(2)
        fork = await agents.stored(machine, "g1").fork(at_seq=4)
        reports = [
            await agents.stored(machine, sid).replay(reexecute=True)
            for sid in ("g1", fork.session_id)
        ]
    assert all(report.ok for report in reports), [r.divergence for r in reports]
    assert reports[0].state.note == "begun"  # rolled back past the edit
    assert reports[1].events == 0
    assert reports[1].state.note == "edited by a human"


async def test_a_changed_event_is_named_as_the_first_divergence() -> None:
    await recorded_run(snapshot_every=100)
    with db() as conn:
        data = event_patch(conn, None, 5)
        data["append"]["thoughts"] = ["a thought nobody had"]
        set_event(conn, None, 5, patch=data)
    async with AgentSystem() as agents:
        report = await agents.stored(offline_machine(), "r1").replay()
    assert report.divergence is not None
    assert report.divergence.seq == 5
    assert "differs from the state committed by this event" in report.divergence.reason
    assert report.events == 4  # the state reached before it
    assert len(report.state.thoughts) == 1


async def test_a_damaged_snapshot_is_reported_at_its_event() -> None:
    await recorded_run(snapshot_every=3)
    with db() as conn:
        seq, state = conn.execute("SELECT seq, state FROM snapshots ORDER BY seq DESC").fetchone()
        data = snapshot_state(state)
        data["note"] = "tampered"
        conn.execute("UPDATE snapshots SET state = ? WHERE seq = ?", (json.dumps(data), seq))
    async with AgentSystem() as agents:
        report = await agents.stored(offline_machine(), "r1").replay()
    assert seq == 6
    assert report.divergence is not None
    assert report.divergence.seq == 7  # the session's last event: the state a resume would use
    assert "the snapshot does not match the events before it" in report.divergence.reason
    assert report.events == 7


def _run(sql: str) -> Callable[[sqlite3.Connection], object]:
    return lambda conn: conn.execute(sql)


@pytest.mark.parametrize(
    ("damage", "seq", "reason"),
    [
        (lambda conn: set_event(conn, None, 3, patch={"set": {"note": 7}}), 3, "does not decode"),
        (_run("DELETE FROM events WHERE seq = 4"), 4, "skips from #3 to #5"),
        (lambda conn: set_event(conn, None, 2, from_state="OBSERVING"), 2, "starts in OBSERVING"),
        (_run("UPDATE events SET digest = 12345 WHERE seq = 6"), 6, "stored 0x3039"),
    ],
    ids=["patch", "gap", "from_state", "digest"],
)
async def test_other_damage_is_reported_at_the_event(
    damage: Callable[[sqlite3.Connection], object], seq: int, reason: str
) -> None:
    await recorded_run()
    with db() as conn:
        damage(conn)
    async with AgentSystem() as agents:
        report = await agents.stored(offline_machine(), "r1").replay()
    assert report.divergence is not None
    assert report.divergence.seq == seq
    assert reason in report.divergence.reason
    assert not report.ok


@pytest.mark.parametrize(
    ("changes", "seq", "reason"),
    [
        ({"prompt": "ponder {n}"}, 2, "asked {'prompt': 'ponder 0'}"),
        ({"skip_tool": True}, 3, "made 1 of the 2 calls the recorded run made"),
        ({"bonus": 1}, 3, "proposed"),
    ],
)
async def test_reexecution_names_the_first_step_whose_stage_changed(
    changes: dict[str, Any], seq: int, reason: str
) -> None:
    await recorded_run()
    async with AgentSystem() as agents:
        folded = await agents.stored(offline_machine(**changes), "r1").replay()
        report = await agents.stored(offline_machine(**changes), "r1").replay(reexecute=True)
    assert folded.ok  # the log itself is intact; only the code changed
    assert report.divergence is not None
    assert report.divergence.seq == seq
    assert reason in report.divergence.reason
    assert report.events == seq - 1


async def test_a_playback_checks_each_call_against_the_record() -> None:
    playback = CallPlayback([{"kind": "model", "request": {"prompt": "x"}, "response": 1}] * 2, "s")
    with playback:
        assert await record_call("model", {"prompt": "x"}, _never) == 1
        assert playback.unused() == 1
        with pytest.raises(ReplayDiverged, match=r"call #2 asked \{'prompt': 'y'\}; the recorded"):
            await record_call("model", {"prompt": "y"}, _never)
        with pytest.raises(ReplayDiverged, match=r"next 'model' call asked \{'prompt': 'x'\}"):
            await record_call("tool:x", {"prompt": "x"}, _never)
        assert await record_call("model", {"prompt": "x"}, _never) == 1
        with pytest.raises(ReplayDiverged, match="call #3 was not made in the recorded run"):
            await record_call("model", {"prompt": "x"}, _never)
    assert playback.diverged is not None  # remembered even if a stage swallowed it
    with pytest.raises(ReplayDiverged, match="after the stage returned"):
        await playback.call("model", {"prompt": "x"}, _never, Any)


async def _never() -> Any:
    raise AssertionError("called through during a playback")


class Odd(Exception):
    """An exception whose constructor wants more than a message (as SDK errors do)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(a, b)
        self.total = a + b


async def test_a_failed_call_is_replayed_as_its_own_class_or_a_typed_stand_in() -> None:
    recorder = CallRecorder()
    with recorder:
        for error in (KeyError("k"), Odd(1, 2)):
            with pytest.raises(type(error)):
                await record_call("t", str(error), _raising(error))
    records = [*recorder.calls, _unknown_error_record()]
    with CallPlayback(records):
        with pytest.raises(KeyError) as key_error:
            await record_call("t", "'k'", _never)
        with pytest.raises(Odd) as odd:
            await record_call("t", "(1, 2)", _never)
        with pytest.raises(RecordedCallFailed, match="Gone: it went") as stand_in:
            await record_call("t", "gone", _never)
    assert key_error.value.args == ("k",)
    assert odd.value.args == (1, 2)
    assert not hasattr(odd.value, "total")  # made without its __init__
    assert stand_in.value.error_type == "not.loaded.Gone"


def _unknown_error_record() -> dict[str, Any]:
    error = {"type": "not.loaded.Gone", "message": "it went", "args": ["it went"]}
    return {"kind": "t", "request": "gone", "error": error}


def _raising(error: Exception) -> Any:
    async def call() -> Any:
        raise error

    return call


async def test_calls_outside_a_stage_are_not_recorded() -> None:
    tools = Tools()
    assert await tools.add(2, 3) == 5
    recorder = CallRecorder()
    with recorder:
        assert await tools.add(a=2, b=4) == 6
        assert await record_call("free", [1, 2], _answer) == 42
    assert recorder.calls == [
        {"kind": "tool:add", "request": {"a": 2, "b": 4}, "response": 6},
        {"kind": "free", "request": [1, 2], "response": 42},
    ]


async def _answer() -> int:
    return 42


async def test_an_unrecordable_call_fails_the_step_and_commits_nothing_of_it() -> None:
    @stage(reads=(), writes={"note"}, next=L.FINISHED)
    async def begin(view: StateView[Research]) -> Patch:
        await record_call("model", {"prompt": "hi"}, _opaque)
        return Patch(note="never committed")

    machine = Machine(
        name="opaque",
        state_type=Research,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: begin},
    )
    async with AgentSystem(path=None) as agents:
        result = await agents.run(machine, Research(), session_id="o1")
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "UnrecordableCall"
    assert "cannot be stored" in result.failure.message
    assert result.state.note == ""
    with pytest.raises(UnrecordableCall, match="request"), CallRecorder():
        await record_call("model", object(), _answer)


async def _opaque() -> object:
    return object()


async def test_replay_refuses_what_it_cannot_do() -> None:
    await recorded_run()
    async with AgentSystem() as agents:
        with pytest.raises(SessionNotFound):
            await agents.stored(offline_machine(), "nope").replay()
        other = Machine(
            name="other",
            state_type=Research,
            initial=L.INITIALIZED,
            terminal={L.FINISHED, L.FAILED},
            failed=L.FAILED,
            transitions={L.INITIALIZED: {L.FINISHED}},
            stages={L.INITIALIZED: research_machine(Model(), Tools()).stages[L.INITIALIZED]},
        )
        with pytest.raises(ConfigurationError, match="runs machine 'research'"):
            await agents.stored(other, "r1").replay()
    async with AgentSystem(path=None) as agents:
        with pytest.raises(ConfigurationError, match="without a store"):
            await agents.stored(offline_machine(), "r1").replay()
