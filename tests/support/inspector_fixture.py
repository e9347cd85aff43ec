"""A store full of varied sessions for the inspector's tests and manual runs.

``desk`` is a small help-desk machine: think (a recorded model call) → act (a
recorded tool call, which fails once with a recoverable error when asked to)
→ review (guarded by a human gate that sets ``approved``) → finished.
``populate(path)`` runs one session of each kind into a SQLite file: finished,
restarted once then finished, failed (fatal) and paused at the gate.
``populate_ids(path, ids)`` pauses one ``desk`` session under each given id
(hostile ones: a subgraph child's ``a/b/1``, ``?``, ``#``, ``%41``...), and
``populate_long(path, marks)`` runs one ``tally`` session of ``marks`` events.

Run ``python -m tests.support.inspector_fixture PATH`` to make such a file, then
``python -m arkhon_rheo.inspector --store PATH --machine tests.support.inspector_fixture:desk``.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    Fatal,
    History,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    StateView,
    record_call,
    recorded,
    stage,
)
from arkhon_rheo.protocols import FrozenMap, Gate

L = Lifecycle


class Reply(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str


class Ticket(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    question: str = ""
    plan: str = ""
    notes: tuple[str, ...] = ()
    approved: bool | None = None
    answer: str = ""
    priority: int = 1


#: How many times each question has reached the tool (the flaky one fails once).
_tool_calls: dict[str, int] = {}


async def _model(question: str) -> Reply:
    return Reply(text=f"look up <{question}>")


@recorded("tool:lookup")
async def lookup(query: str) -> str:
    count = _tool_calls[query] = _tool_calls.get(query, 0) + 1
    if "flaky" in query and count == 1:
        raise Recoverable(f"lookup service hiccup on {query!r}")
    if "fatal" in query:
        raise Fatal(f"lookup refused {query!r}")
    return f"found {len(query)} results"


@stage(reads={"question"}, writes={"plan"}, next=L.ACTING)
async def think(view: StateView[Ticket]) -> Patch:
    reply = await record_call(
        "model", {"prompt": view.question}, lambda: _model(view.question), returns=Reply
    )
    return Patch(plan=reply.text)


@stage(reads={"question", "notes"}, writes={"notes"}, next=L.OBSERVING)
async def act(view: StateView[Ticket]) -> Patch:
    found = await lookup(view.question)
    return Patch(notes=(*view.notes, found))


@stage(reads={"approved", "notes"}, writes={"answer"}, next=L.FINISHED)
async def review(view: StateView[Ticket]) -> Patch:
    verdict = "approved" if view.approved else "declined"
    return Patch(answer=f"{verdict}: {view.notes[-1]}")


desk: Machine[Ticket] = Machine(
    name="desk",
    state_type=Ticket,
    initial=L.INITIALIZED,
    transitions={
        L.INITIALIZED: {L.ACTING},
        L.ACTING: {L.OBSERVING},
        L.OBSERVING: {L.FINISHED},
    },
    stages={L.INITIALIZED: think, L.ACTING: act, L.OBSERVING: review},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
    invariants={None: [lambda s: bool(s.question)], L.FINISHED: [lambda s: bool(s.answer)]},
    gates=[Gate.before("review", field="approved")],
)

#: The machine without its gate: sessions run straight through.
desk_ungated: Machine[Ticket] = Machine(
    name="desk",
    state_type=Ticket,
    initial=L.INITIALIZED,
    transitions=desk.transitions,
    stages=desk.stages,
    terminal=desk.terminal,
    failed=L.FAILED,
    invariants=desk.invariants,
)


async def populate(path: str) -> dict[str, str]:
    """Run one session of each kind into the SQLite file ``path``; return their ids by kind."""
    ids: dict[str, str] = {}
    _tool_calls.clear()
    async with AgentSystem(path=path, seed=7) as system:
        paused = await system.run(desk, Ticket(question="reset my password"))
        ids["paused"] = paused.session_id
        decided = await system.run(desk, Ticket(question="flaky printer"))
        handle = await system.stored(desk, decided.session_id).approve(True)
        assert handle is not None
        ids["finished"] = (await handle.result()).session_id
        failed = await system.run(desk, Ticket(question="fatal disk"))
        ids["failed"] = failed.session_id
    return ids


async def populate_ids(path: str, session_ids: list[str]) -> None:
    """Pause one ``desk`` session under each of ``session_ids`` in the SQLite file ``path``."""
    async with AgentSystem(path=path, seed=7) as system:
        for session_id in session_ids:
            result = await system.run(
                desk, Ticket(question=f"about {session_id}"), session_id=session_id
            )
            assert result.session_id == session_id


class Tally(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    goal: int = 1
    marks: History[int] = History()


def _next_mark(state: Tally) -> Lifecycle:
    return L.FINISHED if len(state.marks) >= state.goal else L.THINKING


@stage(reads={"marks"}, writes={"marks"}, next=_next_mark)
async def mark(view: StateView[Tally]) -> Patch:
    return Patch().append("marks", len(view.marks))


#: A machine that appends one mark per event until it has ``goal`` of them.
tally: Machine[Tally] = Machine(
    name="tally",
    state_type=Tally,
    initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.THINKING, L.FINISHED}, L.THINKING: {L.THINKING, L.FINISHED}},
    stages={L.INITIALIZED: mark, L.THINKING: mark},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
)


async def populate_long(path: str, marks: int) -> str:
    """Run one ``tally`` session of ``marks`` steps into the SQLite file ``path``; its id."""
    async with AgentSystem(path=path, seed=7) as system:
        result = await system.run(tally, Tally(goal=marks), max_steps=marks + 1)
        assert len(result.state.marks) == marks
        return result.session_id


class Chat(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    turns: int = 1
    conversation: History[str] = History()
    meta: FrozenMap[str, int] = FrozenMap()


def _next_turn(state: Chat) -> Lifecycle:
    return L.FINISHED if len(state.conversation) >= state.turns else L.THINKING


@stage(reads={"conversation", "meta"}, writes={"conversation", "meta"}, next=_next_turn)
async def say(view: StateView[Chat]) -> Patch:
    turn = len(view.conversation)
    text = f"message {turn:04d}: " + "words " * 20
    return Patch(meta=FrozenMap({**view.meta, "turn": turn, f"seen{turn % 3}": turn})).append(
        "conversation", text
    )


#: A machine that appends one message to a conversation per event (and counts turns in a dict).
chat: Machine[Chat] = Machine(
    name="chat",
    state_type=Chat,
    initial=L.INITIALIZED,
    transitions={L.INITIALIZED: {L.THINKING, L.FINISHED}, L.THINKING: {L.THINKING, L.FINISHED}},
    stages={L.INITIALIZED: say, L.THINKING: say},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
)


async def populate_chat(path: str, turns: int, session_id: str | None = None) -> str:
    """Run one ``chat`` session of ``turns`` events into the SQLite file ``path``; its id."""
    async with AgentSystem(path=path, seed=7) as system:
        result = await system.run(
            chat, Chat(turns=turns), max_steps=turns + 1, session_id=session_id
        )
        assert len(result.state.conversation) == turns
        return result.session_id


class Route(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    route: tuple[str, ...] = ()
    at: int = 0


def _follow(state: Route) -> Lifecycle:
    return Lifecycle.__members__[state.route[state.at - 1]]


@stage(reads={"route", "at"}, writes={"at"}, next=_follow)
async def hop(view: StateView[Route]) -> Patch:
    return Patch(at=view.at + 1)


#: A machine of many moves out of one state and both ways between two: each session
#: follows the ``route`` of state names its state holds.
hub: Machine[Route] = Machine(
    name="hub",
    state_type=Route,
    initial=L.INITIALIZED,
    transitions={
        L.INITIALIZED: {L.THINKING},
        L.THINKING: {L.THINKING, L.ACTING, L.OBSERVING, L.FINISHED, L.FAILED},
        L.ACTING: {L.THINKING, L.OBSERVING, L.FAILED},
        L.OBSERVING: {L.THINKING, L.ACTING, L.FINISHED},
    },
    stages={L.INITIALIZED: hop, L.THINKING: hop, L.ACTING: hop, L.OBSERVING: hop},
    terminal={L.FINISHED, L.FAILED},
    failed=L.FAILED,
)

#: A route through every move of ``hub`` (the loops several times, so counts have two digits).
HUB_ROUTE: tuple[str, ...] = (
    "THINKING",
    *("THINKING", "ACTING", "THINKING", "OBSERVING", "THINKING") * 11,
    *("ACTING", "OBSERVING", "ACTING", "OBSERVING", "THINKING") * 3,
    "FINISHED",
)


async def populate_hub(path: str, routes: dict[str, tuple[str, ...]]) -> None:
    """Run one ``hub`` session per ``routes`` entry (its id, its route) into ``path``."""
    async with AgentSystem(path=path, seed=7) as system:
        for session_id, route in routes.items():
            await system.run(
                hub, Route(route=route), session_id=session_id, max_steps=len(route) + 1
            )


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "inspector-demo.db"
    ids: Any = anyio.run(populate, path)
    for kind, session_id in ids.items():
        print(kind, session_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
