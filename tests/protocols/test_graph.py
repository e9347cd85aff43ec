"""`StateGraph`: a machine's graph, a session's path, both at once, and their one Mermaid."""

from __future__ import annotations

import enum

import pytest

from arkhon_rheo import AgentState, AgentSystem, Machine, Patch, Stage, StateView
from arkhon_rheo.protocols import GraphEdge, StateGraph, StoredEvent
from arkhon_rheo.testing import run_machine


class Phase(enum.Enum):
    PLAN = "plan"
    LOOP = "loop"
    DONE = "done"
    FAILED = "failed"


class Job(AgentState):
    lifecycle: Phase = Phase.PLAN
    count: int = 0


class Plan(Stage[Job], name="plan", reads={"count"}, writes={"count"}):
    async def execute(self, view: StateView[Job]) -> Patch:
        return Patch(count=0)

    def next(self, state: Job) -> enum.Enum:
        return Phase.LOOP


class Loop(Stage[Job], name="loop", reads={"count"}, writes={"count"}):
    """Stays in LOOP (a self-loop) until its third run, then ends."""

    async def execute(self, view: StateView[Job]) -> Patch:
        return Patch(count=view.count + 1)

    def next(self, state: Job) -> enum.Enum:
        return Phase.DONE if state.count >= 3 else Phase.LOOP


def job_machine() -> Machine[Job]:
    """PLAN -> LOOP (-> LOOP) -> DONE; an error in LOOP is routed to FAILED."""
    return Machine(
        name="job",
        state_type=Job,
        initial=Phase.PLAN,
        # Declared out of the enum's order: the graph follows the enum.
        transitions={Phase.LOOP: {Phase.DONE, Phase.LOOP}, Phase.PLAN: {Phase.LOOP}},
        stages={Phase.LOOP: Loop, Phase.PLAN: Plan},
        terminal={Phase.FAILED, Phase.DONE},
        failed=Phase.FAILED,
        error_routes={Phase.LOOP: Phase.FAILED},
    )


def event(seq: int, kind: str, stage: str | None, source: str, target: str) -> StoredEvent:
    return StoredEvent(
        session_id="s",
        seq=seq,
        kind=kind,
        stage=stage,
        from_state=source,
        to_state=target,
        reads=(),
        writes=(),
        patch=None,
        attempt=1,
        started_at=0.0,
        finished_at=0.0,
    )


#: A finished session of `job_machine`, as the store keeps it.
FINISHED = [
    event(1, "step", "plan", "PLAN", "LOOP"),
    event(2, "step", "loop", "LOOP", "LOOP"),
    event(3, "failure", "loop", "LOOP", "LOOP"),  # a recoverable failure: retried in place
    event(4, "step", "loop", "LOOP", "LOOP"),
    event(5, "step", "loop", "LOOP", "DONE"),
]


def test_the_machine_alone() -> None:
    graph = job_machine().graph()
    assert graph.states == ("PLAN", "LOOP", "DONE", "FAILED")  # the enum's order
    assert (graph.initial, graph.failed) == ("PLAN", "FAILED")
    assert graph.terminal == {"DONE", "FAILED"}
    assert graph.visits == {}
    assert graph.edges == (
        GraphEdge("PLAN", "LOOP", ("plan",), declared=True),
        GraphEdge("LOOP", "LOOP", ("loop",), declared=True),
        GraphEdge("LOOP", "DONE", ("loop",), declared=True),
        GraphEdge("LOOP", "FAILED", ("loop",), declared=True),  # the error route
    )
    assert graph.mermaid() == (
        "stateDiagram-v2\n"
        "    [*] --> PLAN\n"
        "    PLAN --> LOOP: plan\n"
        "    LOOP --> LOOP: loop\n"
        "    LOOP --> DONE: loop\n"
        "    LOOP --> FAILED: loop\n"
        "    DONE --> [*]\n"
        "    FAILED --> [*]\n"
    )
    assert job_machine().graph() == graph  # stable: the same machine, the same graph
    assert hash(graph) == hash(job_machine().graph())


def test_the_path_alone() -> None:
    paused = [
        event(6, "pause", "loop", "DONE", "DONE"),
        event(7, "decision", None, "DONE", "DONE"),
        event(8, "resume", None, "DONE", "DONE"),
    ]
    graph = StateGraph.from_events([*FINISHED, *paused], states=["FAILED", "LOOP"])
    assert graph.states == ("PLAN", "LOOP", "DONE", "FAILED")  # first seen, then the others
    assert graph.initial == "PLAN"
    assert (graph.terminal, graph.failed) == (frozenset(), None)
    assert graph.edges == (  # pauses, decisions and resumes that stay put move nothing
        GraphEdge("PLAN", "LOOP", ("plan",), 1),
        GraphEdge("LOOP", "LOOP", ("loop",), 3),
        GraphEdge("LOOP", "DONE", ("loop",), 1),
    )
    assert graph.visits == {"PLAN": 1, "LOOP": 4, "DONE": 1}
    assert graph.mermaid() == (
        "stateDiagram-v2\n"
        "    [*] --> PLAN\n"
        "    PLAN --> LOOP: plan x1\n"
        "    LOOP --> LOOP: loop x3\n"
        "    LOOP --> DONE: loop x1\n"
    )
    empty = StateGraph.from_events([])
    assert (empty.states, empty.initial, empty.edges) == ((), None, ())
    assert empty.mermaid() == "stateDiagram-v2\n"
    assert (
        StateGraph.from_events(FINISHED, initial="LOOP")
        .mermaid()
        .startswith("stateDiagram-v2\n    [*] --> LOOP\n")
    )


def test_the_path_over_the_machine() -> None:
    failed = [event(1, "step", "plan", "PLAN", "LOOP"), event(2, "failure", "plan", "LOOP", "X")]
    graph = job_machine().graph(FINISHED)
    assert graph.edge("LOOP", "LOOP") == GraphEdge("LOOP", "LOOP", ("loop",), 3, declared=True)
    assert graph.edge("LOOP", "FAILED") == GraphEdge("LOOP", "FAILED", ("loop",), declared=True)
    assert graph.edge("DONE", "PLAN") is None
    assert graph.visits == {"PLAN": 1, "LOOP": 4, "DONE": 1}
    lines = graph.mermaid().splitlines()
    assert lines[2:6] == [
        "    PLAN --> LOOP: plan x1",
        "    LOOP --> LOOP: loop x3",
        "    LOOP --> DONE: loop x1",
        "    LOOP --> FAILED: loop",  # declared, never taken
    ]
    # A move the machine does not declare is added after the declared ones, with
    # what took it; a state the machine does not know is laid out last.
    odd = job_machine().graph(failed)
    assert odd.edges[-1] == GraphEdge("LOOP", "X", ("plan",), 1)
    assert odd.states[-1] == "X"
    assert odd.mermaid().splitlines()[-3:] == [
        "    LOOP --> X: plan x1",
        "    DONE --> [*]",
        "    FAILED --> [*]",
    ]


def test_a_rollback_is_a_move() -> None:
    events = [*FINISHED, event(6, "rollback", None, "DONE", "LOOP")]
    path = StateGraph.from_events(events)
    assert path.edge("DONE", "LOOP") == GraphEdge("DONE", "LOOP", ("rollback",), 1)
    assert path.visits["LOOP"] == 5
    over = job_machine().graph(events)
    assert "    DONE --> LOOP: rollback x1" in over.mermaid().splitlines()
    assert not over.edge("DONE", "LOOP").declared  # type: ignore[union-attr]
    # A rollback that lands in the state it left is a move too: a self-loop.
    again = StateGraph.from_events([event(1, "rollback", None, "LOOP", "LOOP")])
    assert again.edges == (GraphEdge("LOOP", "LOOP", ("rollback",), 1),)


def test_a_self_loop_names_each_stage_that_took_it_once() -> None:
    events = [
        event(1, "step", "loop", "LOOP", "LOOP"),
        event(2, "rollback", None, "LOOP", "LOOP"),
        event(3, "step", "loop", "LOOP", "LOOP"),
    ]
    graph = job_machine().graph(events)
    loop = GraphEdge("LOOP", "LOOP", ("loop", "rollback"), 3, declared=True)
    assert graph.edge("LOOP", "LOOP") == loop
    assert loop.label == "loop, rollback x3"
    assert GraphEdge("A", "B", (), 2).label == "x2"
    assert GraphEdge("A", "B").label == ""
    assert graph.visits == {"LOOP": 4}  # the start, then three times again


def test_plain_names_are_written_as_they_are_and_others_escaped() -> None:
    plain = StateGraph.from_events(FINISHED).mermaid()
    assert "state " not in plain
    assert "#" not in plain
    odd = StateGraph.from_events(
        [
            event(1, "step", 'say "hi"; #1 <b>', "PLAN", "two words"),
            event(2, "step", "line\nbreak", "two words", "s1"),
        ]
    ).mermaid()
    assert odd.splitlines() == [
        "stateDiagram-v2",
        '    state "two words" as s1_',  # ``s1`` is a state's own name
        "    [*] --> PLAN",
        "    PLAN --> s1_: say #34;hi#34;#59; #35;1 #60;b#62; x1",
        "    s1_ --> s1: line#10;break x1",
    ]


@pytest.mark.anyio
async def test_a_live_session_and_its_stored_rollback() -> None:
    run = await run_machine(job_machine(), Job(), session_id="live")
    graph = job_machine().graph(run.events)  # the live TransitionEvents
    assert graph.edge("LOOP", "LOOP") == GraphEdge("LOOP", "LOOP", ("loop",), 2, declared=True)
    assert graph.visits == {"PLAN": 1, "LOOP": 3, "DONE": 1}
    assert StateGraph.from_events(run.events).states == ("PLAN", "LOOP", "DONE")
    async with AgentSystem(path="graph.db") as system:
        await system.run(job_machine(), Job(), session_id="kept")
        stored = system.stored(job_machine(), "kept")
        await stored.rollback(2)
        events = await stored.history()
    graph = job_machine().graph(events)
    assert graph.edge("DONE", "LOOP") == GraphEdge("DONE", "LOOP", ("rollback",), 1)
