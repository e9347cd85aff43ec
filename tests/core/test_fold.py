"""Replaying a session's events reproduces its state; events survive a trip through JSON."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    History,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    StateView,
    Transient,
    stage,
)
from arkhon_rheo.core import fold
from arkhon_rheo.core._codec import EventCodec
from arkhon_rheo.errors import UnserializablePatch
from arkhon_rheo.protocols import EventKind, StoredEvent
from arkhon_rheo.supervision import Backoff

pytestmark = pytest.mark.anyio

L = Lifecycle


class Step(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    n: int


class Journal(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    steps: History[Step] = History()
    note: str = ""
    score: float = 0.0
    #: Bytes that are not UTF-8 cannot be stored as JSON: the unserializable value.
    blob: bytes | None = None


def journal_machine(script: list[Any]) -> Machine[Journal]:
    """Loops THINKING -> ACTING -> OBSERVING three times; `script` injects failures."""

    def take(name: str) -> Any:
        return script.pop(0) if script and script[0][0] == name else None

    @stage(reads=(), writes={"note"}, next=L.THINKING)
    async def load(view: StateView[Journal]) -> Patch:
        return Patch(note="loaded")

    @stage(reads={"steps"}, writes={"steps", "score"}, next=L.ACTING)
    async def think(view: StateView[Journal]) -> Patch:
        if (action := take("think")) is not None:
            raise action[1]
        # A dict for a model: the event must record the validated model.
        return Patch(score=len(view.steps) / 3).append("steps", {"name": "think", "n": 1})

    @stage(reads={"steps"}, writes={"steps", "blob"}, next=L.OBSERVING)
    async def act(view: StateView[Journal]) -> Patch:
        if (action := take("act")) is not None:
            if action[1] == "unserializable":
                return Patch(blob=b"\xff")
            raise action[1]
        return Patch().append("steps", Step(name="act", n=2))

    def after(state: Journal) -> Lifecycle:
        done = sum(1 for s in state.steps if s.name == "observe") >= 3
        return L.FINISHED if done else L.THINKING

    @stage(reads={"steps"}, writes={"steps", "note"}, next=after)
    async def observe(view: StateView[Journal]) -> Patch:
        return Patch(note=f"seen {len(view.steps)}").append("steps", Step(name="observe", n=3))

    return Machine(
        name="journal",
        state_type=Journal,
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
        error_routes={L.ACTING: L.OBSERVING},
    )


SCRIPTS: dict[str, list[tuple[str, Any]]] = {
    "clean": [],
    "transient": [("act", Transient("blip"))],
    "routed": [("act", Recoverable("tool down"))],
    "restarted": [("think", ValueError("bad output"))],
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_replaying_the_log_reproduces_the_state(script: str) -> None:
    machine = journal_machine(list(SCRIPTS[script]))
    initial = Journal(session_id="j")
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
        handle = await system.start(machine, initial, session_id="j")
        result = await handle.result()
    assert result.ok, result.failure
    events = await handle.history()
    assert fold(machine, initial, events) == result.state
    # Any prefix replays to the state committed at that point.
    middle = fold(machine, initial, events[:5])
    assert middle.lifecycle is events[4].to_state


async def test_events_survive_a_round_trip_through_json() -> None:
    machine = journal_machine([("act", Recoverable("tool down"))])
    initial = Journal(session_id="j")
    async with AgentSystem(path=None) as system:
        handle = await system.start(machine, initial, session_id="j")
        result = await handle.result()
    codec = EventCodec(machine)
    stored = [codec.encode_event(event) for event in (await handle.history())]
    wire = json.loads(json.dumps([_plain(s) for s in stored]))
    decoded = [codec.decode_event(StoredEvent(**item)) for item in wire]
    assert decoded == list(await handle.history())
    assert any(e.kind is EventKind.FAILURE for e in decoded)
    snapshot = json.loads(json.dumps(codec.encode_state(initial)))
    assert fold(machine, codec.decode_state(snapshot), decoded) == result.state


def test_an_unserializable_value_is_refused_with_the_field_named() -> None:
    codec = EventCodec(journal_machine([]))
    with pytest.raises(UnserializablePatch, match="'blob'"):
        codec.encode_patch(Patch(blob=b"\xff"), stage="act")
    assert codec.encode_patch(Patch(score=math.pi))["set"]["score"] == math.pi


def _plain(event: StoredEvent) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(event)
