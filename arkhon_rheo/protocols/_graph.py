"""`StateGraph`: a machine's states and moves, and the path a session took through them.

One pure model, drawn as Mermaid by `StateGraph.mermaid` and used by the
command line (``arkhon-rheo graph``) and the inspector (which lays it out as
SVG). It is built from a machine (`Machine.graph`: every declared transition
and error route, labelled with the stage of its source state), from a
session's events (`StateGraph.from_events`: the moves it took), or from both
(the machine with the session's path laid over it, moves it does not declare
added). States are named as the store names them: an enum member's ``name``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._frozen import FrozenMap

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._events import TransitionEvent
    from ._store import StoredEvent

__all__ = ["GraphEdge", "StateGraph", "build_graph"]

#: Event kinds that record no move of their own when the state stays where it was
#: (a rollback, a failure or a step that stays in place is a move: a self-loop).
_STILL = frozenset({"start", "resume", "pause", "decision", "upgrade"})

#: A state name Mermaid takes as an id as it is; any other is declared under an alias.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Characters a Mermaid label cannot hold as they are: written as ``#<code>;``.
_SPECIAL = re.compile(r'[\x00-\x1f\x7f#;"<>&{}`]')


def _name(state: object) -> str:
    """A state as the store names it: an enum member's name, else its text."""
    return state.name if isinstance(state, enum.Enum) else str(state)


def _kind(kind: object) -> str:
    """An event's kind as text (an `EventKind`'s value, or a stored event's string)."""
    return str(kind.value) if isinstance(kind, enum.Enum) else str(kind)


def _text(label: str) -> str:
    """``label`` safe in a Mermaid line: special characters as entity codes."""
    return _SPECIAL.sub(lambda match: f"#{ord(match.group())};", label)


@dataclass(frozen=True, slots=True)
class GraphEdge:
    """One move of a `StateGraph`.

    Attributes:
        source: The state it leaves.
        target: The state it enters.
        stages: What takes it: the stage of the source state where the machine
            declares it, then the stages (or, for events without one, the event
            kinds, such as ``rollback``) of the session's events that took it.
        taken: How many times the session took it (0: never, or no session).
        declared: Whether the machine declares it (a transition or an error route).
    """

    source: str
    target: str
    stages: tuple[str, ...] = ()
    taken: int = 0
    declared: bool = False

    @property
    def label(self) -> str:
        """The edge's label: its stages, with `` xN`` where the session took it N times."""
        text = ", ".join(self.stages)
        if self.taken:
            return f"{text} x{self.taken}" if text else f"x{self.taken}"
        return text


@dataclass(frozen=True, slots=True)
class StateGraph:
    """A machine's states and moves, with what a session did with them.

    Build one with `Machine.graph` (the machine, with a session's path if its
    events are given) or `StateGraph.from_events` (the path alone, without the
    machine).

    Attributes:
        states: Every state, in layout order: the machine's in their enum's
            declaration order (the initial one first), then any other a path
            names, in the order it first appears.
        initial: The initial state (the path's first, without a machine), or
            ``None`` for an empty path.
        terminal: The terminal states (none are known without a machine).
        failed: The state a fatal error leads to (``None`` without a machine).
        edges: The moves: the machine's declared ones in layout order of their
            source, then target; then those the session took that the machine
            does not declare, in the order first taken.
        visits: How many times the session entered each state: its first state
            once, then once per move taken into it (self-loops included). Empty
            without events.
    """

    states: tuple[str, ...]
    initial: str | None
    terminal: frozenset[str]
    failed: str | None
    edges: tuple[GraphEdge, ...]
    visits: FrozenMap[str, int]

    @classmethod
    def from_events(
        cls,
        events: Iterable[StoredEvent | TransitionEvent],
        *,
        states: Iterable[str] = (),
        initial: str | None = None,
    ) -> StateGraph:
        """The path a session took, without its machine.

        Resumes, pauses and decisions that leave the state where it was move
        nothing and are left out; a rollback is a move (back to where the
        session was), and so is a failure or step that stays in its state.

        Args:
            events: The session's events, stored (`StoredEvent`) or live
                (`TransitionEvent`), in order.
            states: States to lay out besides those the path names (say, a
                stored fingerprint's), after them.
            initial: The state to draw as the start; by default the first
                event's source.

        Returns:
            The graph of the moves taken.
        """
        return build_graph(events=events, extra=states, initial=initial)

    def edge(self, source: str, target: str) -> GraphEdge | None:
        """The edge from ``source`` to ``target``, or ``None`` if the graph has none."""
        return next((e for e in self.edges if (e.source, e.target) == (source, target)), None)

    def mermaid(self) -> str:
        """The graph as a Mermaid ``stateDiagram-v2``.

        Each edge is labelled with its stages and, where the session took it,
        `` xN`` (``THINKING --> ACTING: think x2``). States whose names are not
        plain identifiers are declared under an alias (``state "…" as s3``);
        special characters in labels are written as entity codes (``#35;``).
        """
        ids = _ids(self.states)
        lines = ["stateDiagram-v2"]
        lines.extend(
            f'    state "{_text(name)}" as {ident}' for name, ident in ids.items() if ident != name
        )
        if self.initial is not None:
            lines.append(f"    [*] --> {ids[self.initial]}")
        for edge in self.edges:
            label = edge.label
            lines.append(
                f"    {ids[edge.source]} --> {ids[edge.target]}"
                + (f": {_text(label)}" if label else "")
            )
        lines.extend(f"    {ids[state]} --> [*]" for state in self.states if state in self.terminal)
        return "\n".join(lines) + "\n"


def _ids(states: tuple[str, ...]) -> dict[str, str]:
    """A Mermaid id for each state: its name when plain, else an unused ``s<i>``."""
    ids: dict[str, str] = {}
    for index, name in enumerate(states):
        if _PLAIN.fullmatch(name):
            ids[name] = name
            continue
        alias = f"s{index}"
        while alias in states:
            alias += "_"
        ids[name] = alias
    return ids


def _taken(
    events: Iterable[StoredEvent | TransitionEvent],
) -> tuple[str | None, dict[tuple[str, str], list[str]], dict[tuple[str, str], int]]:
    """The path's first state, and per move taken: what took it and how many times."""
    start: str | None = None
    labels: dict[tuple[str, str], list[str]] = {}
    counts: dict[tuple[str, str], int] = {}
    for event in events:
        key = (_name(event.from_state), _name(event.to_state))
        if start is None:
            start = key[0]
        kind = _kind(event.kind)
        if kind in _STILL and key[0] == key[1]:
            continue
        counts[key] = counts.get(key, 0) + 1
        names = labels.setdefault(key, [])
        label = event.stage or kind
        if label not in names:
            names.append(label)
    return start, labels, counts


def build_graph(
    *,
    events: Iterable[StoredEvent | TransitionEvent] = (),
    states: Iterable[str] = (),
    initial: str | None = None,
    terminal: Iterable[str] = (),
    failed: str | None = None,
    declared: Iterable[tuple[str, str, str | None]] = (),
    extra: Iterable[str] = (),
) -> StateGraph:
    """A `StateGraph` from names (what `Machine.graph` and `StateGraph.from_events` share).

    Args:
        events: The session's events, in order (none: the machine alone).
        states: The machine's states, in layout order.
        initial: The initial state; by default the path's first.
        terminal: The terminal states.
        failed: The failed state.
        declared: The machine's moves, each ``(source, target, stage)``, in order.
        extra: States to lay out after all others.

    Returns:
        The graph.
    """
    start, labels, counts = _taken(events)
    edges: list[GraphEdge] = []
    for source, target, stage in declared:
        names = [stage] if stage else []
        names.extend(n for n in labels.pop((source, target), ()) if n not in names)
        taken = counts.get((source, target), 0)
        edges.append(GraphEdge(source, target, tuple(names), taken, declared=True))
    edges.extend(
        GraphEdge(src, dst, tuple(names), counts[src, dst]) for (src, dst), names in labels.items()
    )
    visits: dict[str, int] = {start: 1} if start is not None else {}
    for (_, target), taken in counts.items():
        visits[target] = visits.get(target, 0) + taken
    initial = initial if initial is not None else start
    order = dict.fromkeys(
        [
            *([initial] if initial is not None else []),
            *states,
            *([start] if start is not None else []),
            *(name for edge in edges for name in (edge.source, edge.target)),
            *extra,
        ]
    )
    return StateGraph(
        states=tuple(order),
        initial=initial,
        terminal=frozenset(terminal),
        failed=failed,
        edges=tuple(edges),
        visits=FrozenMap(visits),
    )
