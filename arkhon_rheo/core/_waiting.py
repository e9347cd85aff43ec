"""What a stopped session waits for, read off its record and its events: `waits_for`.

One function answers it for every reader (``arkhon-rheo show`` and
``sessions``, the inspector's session page), from what the store keeps and,
where the reader has it, the session's machine. A parked session (``waiting``)
waits for a message of the kinds its state's `Receive` stage accepts, or for
its next timer; its record says which (`SessionRecord.waiting`, ``wake_at``).
A session paused at a gate waits for a decision: its record (or, for one
stored before records said so, its pause event) names the gate, the stage it
guards and the gate's question; the machine's `Gate` names the field an
approve value is written to, and the state class that field's type.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from datetime import datetime
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
        kind: What it waits for: ``"decision"`` (a human's, at a gate),
            ``"message"`` (a parked session's next message, or timer) or
            ``"child"`` (the end of a subgraph's child session that waits).
        gate: The gate it is paused at.
        stage: The stage the gate guards (it runs once the session is
            approved), or the `Receive` stage that applies the next message.
        field: The state field an approve value is written to (``None``: the
            gate takes no value, or neither the record nor the machine says).
        type: That field's type, as the state class declares it.
        resolved: Whether ``field`` is known (from the record or the machine).
        question: The gate's question (JSON data), if it asks one.
        answer: The JSON schema of the answer the gate takes, if it types it.
        accepts: The message kinds a parked session's state accepts.
        wake_at: When a parked session's next timer falls due (seconds since
            the epoch), if one is set.
        child: For ``"child"`` (a subgraph's child session it waits on to end):
            the child's id.
        child_status: How that child waited when it parked: ``"paused"`` (at a
            gate) or ``"waiting"`` (for a message); answer it by its id.
    """

    kind: str
    gate: str | None = None
    stage: str | None = None
    field: str | None = None
    type: str | None = None
    resolved: bool = False
    question: Any = None
    answer: Any = None
    accepts: tuple[str, ...] = ()
    wake_at: float | None = None
    child: str | None = None
    child_status: str | None = None

    def as_json(self) -> dict[str, Any]:
        """As JSON data (the ``waits_for`` of ``show --json``); ``child`` only for a child."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "gate": self.gate,
            "stage": self.stage,
            "field": self.field,
            "type": self.type,
            "resolved": self.resolved,
            "question": self.question,
            "answer": self.answer,
            "accepts": list(self.accepts),
            "wake_at": self.wake_at,
        }
        if self.kind == "child":
            data.update(child=self.child, child_status=self.child_status)
        return data

    def describe(self) -> str:
        """In a few words, for a line of text."""
        if self.kind == "child":
            how = {"paused": "paused at a gate", "waiting": "waiting for a message"}
            said = how.get(self.child_status or "", "waiting")
            return (
                f"its child session {self.child!r} to end (it was {said}: decide or "
                "send to it by its id)"
            )
        if self.kind == "message":
            kinds = ", ".join(self.accepts) or "any kind"
            text = f"a message ({kinds})"
            if self.stage is not None:
                text += f" for stage {self.stage!r}"
            if self.wake_at is not None:
                when = datetime.fromtimestamp(self.wake_at).strftime("%Y-%m-%d %H:%M:%S")
                text += f"; a timer wakes it at {when}"
            return text
        text = f"a decision at gate {self.gate!r}"
        if self.stage is not None:
            text += f", before stage {self.stage!r}"
        if self.question is not None:
            text += f", asking {self.question!r}"
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
        For a paused session, the decision it waits for; for a parked one, the
        message (or timer), or the child session it waits on; else ``None``.
    """
    said = record.waiting if isinstance(record.waiting, dict) else {}
    if record.status == "waiting" and said.get("child") is not None:
        return WaitsFor(
            "child",
            stage=said.get("stage"),
            child=str(said["child"]),
            child_status=said.get("child_status"),
        )
    if record.status == "waiting":
        return WaitsFor(
            "message",
            stage=said.get("stage"),
            accepts=tuple(str(kind) for kind in said.get("accepts") or ()),
            wake_at=record.wake_at,
        )
    if record.status != "paused":
        return None
    info = said
    if "gate" not in info:  # stored before records said what a pause waits for
        pause = next((event for event in reversed(events) if event.kind == _PAUSE), None)
        info = pause.io if pause is not None and isinstance(pause.io, dict) else {}
    name, stage = info.get("gate"), info.get("stage")
    question, answer = info.get("question"), info.get("answer")
    gate = None
    if machine is not None:
        gate = next((gate for gate in machine.gates if gate.name == name), None)
    if gate is None:
        field = info.get("field")
        return WaitsFor(
            "decision",
            gate=name,
            stage=stage,
            field=field,
            resolved="field" in info,
            question=question,
            answer=answer,
        )
    field = gate.field
    found = machine.state_type.model_fields.get(field) if machine and field else None
    return WaitsFor(
        "decision",
        gate=name,
        stage=stage if stage is not None else gate.stage,
        field=field,
        type=type_text(found.annotation) if found is not None else None,
        resolved=True,
        question=question,
        answer=answer,
    )
