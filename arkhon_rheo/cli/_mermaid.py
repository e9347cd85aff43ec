"""Mermaid ``stateDiagram-v2`` text for a machine, and for the path a session took.

Both are pure functions of their input: the machine's declared states and
transitions, or the ``from_state``/``to_state`` names of a session's stored
events (JSON, so no machine is needed to draw where a session went).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..protocols import Machine, StoredEvent

__all__ = ["machine_diagram", "overlay_diagram", "path_diagram", "path_edges"]

#: Events that record no move of their own (the state stays where it was).
_STILL = frozenset({"resume", "pause", "decision"})


def machine_diagram(machine: Machine[Any]) -> str:
    """The machine as Mermaid: each allowed transition labelled with the stage that takes it.

    Every non-terminal state may also move to the failed state on a fatal error;
    those implicit edges are drawn only where the machine declares them.
    """
    lines = ["stateDiagram-v2", f"    [*] --> {machine.initial.name}"]
    for source in sorted(machine.transitions, key=_order(machine)):
        stage = machine.stages.get(source)
        label = f": {stage.name}" if stage is not None else ""
        lines.extend(
            f"    {source.name} --> {target.name}{label}"
            for target in sorted(machine.transitions[source], key=_order(machine))
        )
    lines.extend(
        f"    {state.name} --> [*]" for state in sorted(machine.terminal, key=_order(machine))
    )
    return "\n".join(lines) + "\n"


def _order(machine: Machine[Any]) -> Any:
    """Sort states as their enum declares them (so diagrams are stable)."""
    members = list(type(machine.initial))
    return lambda state: members.index(state) if state in members else len(members)


def path_edges(events: Iterable[StoredEvent]) -> list[tuple[str, str, str, int]]:
    """The moves a session made: ``(from, to, stages, visits)``, in first-seen order.

    Resumes, pauses and decisions move nothing and are left out; a rollback is a
    move (back to where the session was).
    """
    counts: Counter[tuple[str, str]] = Counter()
    stages: dict[tuple[str, str], list[str]] = {}
    for event in events:
        if event.kind in _STILL and event.from_state == event.to_state:
            continue
        key = (event.from_state, event.to_state)
        counts[key] += 1
        label = event.stage or event.kind
        names = stages.setdefault(key, [])
        if label not in names:
            names.append(label)
    return [(src, dst, ", ".join(stages[(src, dst)]), n) for (src, dst), n in counts.items()]


def path_diagram(events: Iterable[StoredEvent], *, initial: str | None = None) -> str:
    """The path a session took as Mermaid, each edge labelled with its stage and visits."""
    events = list(events)
    start = initial or (events[0].from_state if events else None)
    lines = ["stateDiagram-v2"]
    if start is not None:
        lines.append(f"    [*] --> {start}")
    for src, dst, stages, visits in path_edges(events):
        lines.append(f"    {src} --> {dst}: {stages} x{visits}")
    return "\n".join(lines) + "\n"


def overlay_diagram(machine: Machine[Any], events: Iterable[StoredEvent]) -> str:
    """The machine as Mermaid with the session's visits on the edges it took.

    Edges the session never took keep their stage name alone; moves the machine
    does not declare (a fatal error's move to the failed state, a rollback) are
    added with their visits.
    """
    taken = {(src, dst): (stages, n) for src, dst, stages, n in path_edges(events)}
    order = _order(machine)
    lines = ["stateDiagram-v2", f"    [*] --> {machine.initial.name}"]
    for source in sorted(machine.transitions, key=order):
        stage = machine.stages.get(source)
        for target in sorted(machine.transitions[source], key=order):
            key = (source.name, target.name)
            if key in taken:
                stages, visits = taken.pop(key)
                lines.append(f"    {source.name} --> {target.name}: {stages} x{visits}")
            else:
                label = f": {stage.name}" if stage is not None else ""
                lines.append(f"    {source.name} --> {target.name}{label}")
    for (src, dst), (stages, visits) in taken.items():
        lines.append(f"    {src} --> {dst}: {stages} x{visits}")
    lines.extend(f"    {state.name} --> [*]" for state in sorted(machine.terminal, key=order))
    return "\n".join(lines) + "\n"
