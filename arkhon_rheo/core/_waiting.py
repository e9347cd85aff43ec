"""What a stopped session waits for, read off its record and its events: `waits_for`.

One function answers it for every reader (``arkhon-rheo show``, the inspector's
session page), from what the store keeps and, where the reader has it, the
session's machine. A session paused at a gate waits for a decision: the pause
event names the gate and the stage it guards; the machine's `Gate` names the
field an approve value is written to, and the state class that field's type.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..protocols import EventKind

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..protocols import Machine, SessionRecord, StoredEvent

__all__ = ["WaitsFor", "type_text", "waits_for"]

_PAUSE = EventKind.PAUSE.value


@dataclass(frozen=True, slots=True)
class WaitsFor:
    """What a session waits for before it goes on.

    Attributes:
        kind: What it waits for: ``"decision"`` (a human's, at a gate).
        gate: The gate it is paused at.
        stage: The stage the gate guards: it runs once the session is approved.
        field: The state field an approve value is written to (``None``: the
            gate takes no value, or the machine was not given to say).
        type: That field's type, as the state class declares it.
        resolved: Whether the gate was found in the session's machine, so
            ``field`` and ``type`` are known.
    """

    kind: str
    gate: str | None = None
    stage: str | None = None
    field: str | None = None
    type: str | None = None
    resolved: bool = False

    def as_json(self) -> dict[str, Any]:
        """As JSON data (the ``waits_for`` of ``show --json``)."""
        return {
            "kind": self.kind,
            "gate": self.gate,
            "stage": self.stage,
            "field": self.field,
            "type": self.type,
            "resolved": self.resolved,
        }

    def describe(self) -> str:
        """In a few words, for a line of text."""
        text = f"a decision at gate {self.gate!r}"
        if self.stage is not None:
            text += f", before stage {self.stage!r}"
        if not self.resolved:
            return text
        if self.field is None:
            return text + "; approve takes no value"
        typed = f" ({self.type})" if self.type is not None else ""
        return text + f"; approve writes field {self.field!r}{typed}"


def type_text(annotation: Any) -> str:
    """A field's type as it reads in its class: ``bool``, ``str | None``, ``list[int]``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def waits_for(
    record: SessionRecord, events: Sequence[StoredEvent], machine: Machine[Any] | None = None
) -> WaitsFor | None:
    """What the session of ``record`` waits for (``None``: it is not waiting).

    Args:
        record: The session's stored record (its status says whether it waits).
        events: Its stored events (the latest pause among them names the gate).
        machine: The session's machine, if the reader has it: it names the
            gate's field, and the state class that field's type.

    Returns:
        For a paused session, the decision it waits for; else ``None``.
    """
    if record.status != "paused":
        return None
    pause = next((event for event in reversed(events) if event.kind == _PAUSE), None)
    info = pause.io if pause is not None and isinstance(pause.io, dict) else {}
    name, stage = info.get("gate"), info.get("stage")
    gate = None
    if machine is not None:
        gate = next((gate for gate in machine.gates if gate.name == name), None)
    if gate is None:
        return WaitsFor("decision", gate=name, stage=stage)
    field = gate.field
    found = machine.state_type.model_fields.get(field) if machine and field else None
    return WaitsFor(
        "decision",
        gate=name,
        stage=stage if stage is not None else gate.stage,
        field=field,
        type=type_text(found.annotation) if found is not None else None,
        resolved=True,
    )
