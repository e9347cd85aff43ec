"""Paths across sessions: a machine's moves summed over all its stored sessions, by outcome.

`gather_paths` reads a store's sessions of one machine once, a few histories
at a time (no more than those sessions' events in memory), and counts, for each
outcome group (finished, failed, stuck, running: `group_of`), how many
sessions there are, how many events they took, how many times they took each
move, and in which state they stopped. A move is counted as a session's graph
counts it (`StateGraph.from_events`: resumes, pauses and decisions that stay
in place move nothing). The view draws the machine's graph with these counts
on its edges, so a user sees which paths end in failure and where sessions
get stuck.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import SessionNotFound
from ..protocols import StateGraph
from ._outcome import GROUPS, group_of

if TYPE_CHECKING:
    from ..protocols import Machine, Store, StoredEvent

__all__ = ["Paths", "gather_paths"]

Move = tuple[str, str]

#: How many histories `gather_paths` reads at once (and holds at most).
WINDOW = 16


@dataclass(slots=True)
class Paths:
    """One machine's sessions, summed by outcome group.

    Attributes:
        machine: The machine's name.
        sessions: How many sessions in each group.
        events: How many events the sessions of each group took, all together.
        moves: Per move ``(source, target)``: how many times the sessions of
            each group took it.
        stopped: Per group: how many of its sessions stopped in each state
            (their last event's target).
        states: States the sessions' records name (their fingerprints), for a
            graph drawn without the machine.
        examples: One stored event per move and label, in the order first
            taken: the moves to draw, with their stages.
    """

    machine: str
    sessions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    events: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    moves: dict[Move, dict[str, int]] = field(default_factory=dict)
    stopped: dict[str, dict[str, int]] = field(default_factory=lambda: {g: {} for g in GROUPS})
    states: tuple[str, ...] = ()
    examples: dict[tuple[str, str, str], StoredEvent] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """How many sessions were counted."""
        return sum(self.sessions.values())

    def average(self, group: str) -> float | None:
        """The mean number of events of the group's sessions (``None`` for none)."""
        count = self.sessions[group]
        return self.events[group] / count if count else None

    def taken(self, move: Move, group: str | None = None) -> int:
        """How many times the sessions of ``group`` (or of all) took ``move``."""
        counts = self.moves.get(move, {})
        return counts.get(group, 0) if group is not None else sum(counts.values())

    def add(self, status: str, history: tuple[StoredEvent, ...]) -> None:
        """Count one session of stored ``status`` and its events."""
        group = group_of(status)
        self.sessions[group] += 1
        self.events[group] += len(history)
        if not history:
            return
        ends = self.stopped[group]
        ends[history[-1].to_state] = ends.get(history[-1].to_state, 0) + 1
        edges = {(e.source, e.target): e for e in StateGraph.from_events(history).edges}
        for move, edge in edges.items():
            counts = self.moves.setdefault(move, dict.fromkeys(GROUPS, 0))
            counts[group] += edge.taken
        for event in history:  # an event of each move and label, to draw the move by
            label = event.stage or event.kind
            taken = edges.get((event.from_state, event.to_state))
            if taken is not None and label in taken.stages:
                self.examples.setdefault((event.from_state, event.to_state, label), event)

    def graph(self, machine: Machine[Any] | None) -> StateGraph:
        """The graph to draw: the machine's, with every move taken; or the moves alone."""
        taken = list(self.examples.values())
        if machine is not None:
            return machine.graph(taken)
        return StateGraph.from_events(taken, states=self.states)

    def as_json(self) -> dict[str, Any]:
        """The counts as JSON data (the ``/api/paths`` answer)."""
        return {
            "machine": self.machine,
            "sessions": dict(self.sessions),
            "average_events": {group: self.average(group) for group in GROUPS},
            "moves": [
                {"source": src, "target": dst, **counts}
                for (src, dst), counts in self.moves.items()
            ],
            "stopped": {group: dict(ends) for group, ends in self.stopped.items()},
        }


async def gather_paths(store: Store, machine: str, *, window: int = WINDOW) -> Paths:
    """Sum the moves of every stored session of ``machine``, by outcome, in one pass.

    The histories are read ``window`` at a time, all of a window at once (so
    the store answers one while the next waits), then counted in the
    sessions' order and let go before the next window is read: at most
    ``window`` sessions' events are held. A session removed meanwhile is left
    out.

    Args:
        store: The store (entered).
        machine: The machine's name, as the sessions' records hold it.
        window: How many histories are read at once.

    Returns:
        The counts.
    """
    paths = Paths(machine)
    states: dict[str, None] = {}
    records = [record for record in await store.sessions() if record.machine == machine]
    for start in range(0, len(records), window):
        batch = records[start : start + window]
        histories: list[tuple[StoredEvent, ...] | None] = [None] * len(batch)

        async def read(index: int, session_id: str, into: list[Any] = histories) -> None:
            with contextlib.suppress(SessionNotFound):
                into[index] = await store.history(session_id)

        async with anyio.create_task_group() as tg:
            for index, record in enumerate(batch):
                tg.start_soon(read, index, record.session_id)
        for record, history in zip(batch, histories, strict=True):
            if history is None:
                continue
            paths.add(record.status, history)
            if isinstance(record.fingerprint, dict):
                states.update(dict.fromkeys(record.fingerprint.get("states") or ()))
    paths.states = tuple(states)
    return paths
