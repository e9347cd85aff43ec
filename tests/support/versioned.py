"""Versions of one machine (``"notes"``), for the versioned-state tests and ``check``'s.

Version 1 keeps notes (a sequence field, appended), tags (a set), a score and
a draft. The later versions, under the same name, each change one thing:
`ADDED` adds a field with a default (compatible: still version 1), `RENAMED`
renames ``score`` to ``points`` (version 2, with its upgrade), `REMOVED` drops
``draft`` (version 2, with its upgrade); the ``*_UNDECLARED`` ones make those
changes without declaring them, `RETYPED` changes ``score``'s type.

``THINKING -> ACTING -> THINKING ... -> FINISHED`` after ``cycles`` cycles;
``think`` appends a note, adds a tag and counts; ``act`` waits for `HOLD`'s
event when one is set (a session can be left "running" mid-stage).
"""

from __future__ import annotations

from typing import Any

import anyio

from arkhon_rheo import (
    AgentState,
    Gate,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.protocols import Upgrade

L = Lifecycle
NAME = "notes"

#: Set by a test: ``act`` waits for it (``None``: ``act`` goes straight on).
HOLD: dict[str, anyio.Event | None] = {"event": None, "inside": None}


class NotesV1(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    notes: History[str] = History()
    tags: frozenset[str] = frozenset()
    score: int = 0
    draft: str = ""


class NotesAdded(NotesV1):
    mood: str = "calm"


class NotesRenamed(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    notes: History[str] = History()
    tags: frozenset[str] = frozenset()
    points: int = 0
    draft: str = ""


class NotesRemoved(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    notes: History[str] = History()
    tags: frozenset[str] = frozenset()
    score: int = 0


class NotesV3(AgentState):
    """Version 3: version 2's ``points`` (renamed from ``score``), without ``draft``."""

    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    notes: History[str] = History()
    tags: frozenset[str] = frozenset()
    points: int = 0


class NotesRetyped(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    notes: History[str] = History()
    tags: frozenset[str] = frozenset()
    score: str = ""
    draft: str = ""


def build(
    state_type: type[AgentState],
    *,
    version: int = 1,
    upgrades: dict[int, Any] | None = None,
    gated: bool = False,
) -> Machine[Any]:
    """The notes machine over ``state_type`` (its score field, and draft if it has one)."""
    fields = state_type.model_fields
    score = "points" if "points" in fields else "score"
    counts = fields[score].annotation is int
    writes = {
        "notes",
        "tags",
        *({score} if counts else ()),
        *({"draft"} if "draft" in fields else ()),
    }

    @stage(reads={"iteration", "tags", score}, writes=writes, next=L.ACTING, name="think")
    async def think(view: StateView[Any]) -> Patch:
        cycle = view.iteration
        values: dict[str, Any] = {"tags": view.tags | {f"t{cycle % 2}"}}
        if counts:
            values[score] = getattr(view, score) + 1
        if "draft" in writes:
            values["draft"] = f"draft {cycle}"
        return Patch(**values).append("notes", f"note {cycle}")

    @stage(
        reads={"iteration", "cycles"},
        writes=(),
        next=lambda s: L.FINISHED if s.iteration + 1 >= s.cycles else L.THINKING,
        name="act",
    )
    async def act(view: StateView[Any]) -> Patch:
        event = HOLD["event"]
        if event is not None:
            inside = HOLD["inside"]
            if inside is not None:
                inside.set()
            await event.wait()
        return Patch()

    return Machine(
        name=NAME,
        state_type=state_type,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.ACTING}, L.ACTING: {L.THINKING, L.FINISHED}},
        stages={L.THINKING: think, L.ACTING: act},
        loop_state=L.THINKING,
        gates=[Gate.before("act")] if gated else [],
        version=version,
        upgrades=upgrades,
    )


def v1(*, gated: bool = False) -> Machine[Any]:
    return build(NotesV1, gated=gated)


def added(*, gated: bool = False) -> Machine[Any]:
    return build(NotesAdded, gated=gated)


def renamed(*, gated: bool = False) -> Machine[Any]:
    return build(
        NotesRenamed, version=2, upgrades={1: Upgrade(rename={"score": "points"})}, gated=gated
    )


def removed(*, gated: bool = False) -> Machine[Any]:
    return build(NotesRemoved, version=2, upgrades={1: Upgrade(remove=["draft"])}, gated=gated)


def version_3() -> Machine[Any]:
    """Version 3, reading version 1 (through 2) and version 2 sessions."""
    upgrades = {1: Upgrade(rename={"score": "points"}), 2: Upgrade(remove=["draft"])}
    return build(NotesV3, version=3, upgrades=upgrades)


def renamed_undeclared() -> Machine[Any]:
    return build(NotesRenamed)


def removed_undeclared() -> Machine[Any]:
    return build(NotesRemoved)


def retyped() -> Machine[Any]:
    return build(NotesRetyped)


#: The later versions by the change each makes, for parametrized tests.
VERSIONS = {"added": added, "renamed": renamed, "removed": removed}


async def store_version_1(system: Any, *, cycles: int = 2) -> None:
    """Leave a ``paused`` session (at the gate before ``act``) and a ``running`` one.

    ``running`` is left mid-``act`` when the caller leaves the system's block
    with `HOLD` set; ``paused`` waits for a decision. Both are version 1's.
    """
    await system.run(v1(gated=True), NotesV1(cycles=1), session_id="paused")
    HOLD["event"], HOLD["inside"] = anyio.Event(), anyio.Event()
    await system.start(v1(), NotesV1(cycles=cycles), session_id="running")
    inside = HOLD["inside"]
    assert inside is not None
    await inside.wait()
