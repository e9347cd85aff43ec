"""A session's inbox, as its supervisor uses it: receive a message, or park; post timers.

In a state whose stage is a `Receive` stage, the supervisor asks `Inbox.receive`
for the message to apply: the first pending one, in the order the inbox took
them, of a kind the stage accepts and due now (a timer waits for its time; a
message sent is due at once). With none, the session
parks: the store, in one transaction, refuses if such a message arrived
meanwhile (then it is received after all) or records the session as waiting
(what it waits for, and when its next timer falls due) and gives its lease up.

The step that applies a message commits with it (`Mail`): the store marks the
message applied in the transaction that stores the step's event, so a message
is applied exactly once, and a crash before that commit leaves it pending for
the next run. Timers the step scheduled (`schedule`) are posted in the same
transaction, their `Sensitive` fields sealed as a sent message's are (the
inbox row and the event's ``info["timers"]`` keep tokens; delivery opens them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import ValidationError

from .._errors import ConfigurationError, Fatal
from .._log import get_logger
from .._redact import scrub_data
from ..protocols import EventKind, NewMessage, Patch
from ..protocols._seams import check_json, json_data
from ._commit_rule import state_label
from ._decision import DECISIONS
from ._persist import Mail
from ._record import ExitReason
from ._secrets import open_message, seal_message
from ._subgraph import applied_info

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..core import Keyring
    from ..protocols import AgentState, Gate, StoredMessage
    from ..protocols._seams import ScheduledMessage
    from ._record import Session

__all__ = ["Delivery", "Inbox", "Mail", "message_record"]

_logger = get_logger("arkhon_rheo.supervision")


class Delivery(NamedTuple):
    """A message taken from the inbox for one step: as stored, and decoded."""

    stored: StoredMessage
    message: BaseModel


def message_record(stored: StoredMessage) -> dict[str, Any]:
    """What the event that applies inbox message ``stored`` records of it (``info["message"]``)."""
    return {
        "id": stored.message_id,
        "position": stored.position,
        "kind": stored.kind,
        "payload": stored.payload,
        "posted_at": stored.posted_at,
        "due_at": stored.due_at,
    }


def waiting_for(state: AgentState, stage: str, kinds: list[str]) -> dict[str, Any]:
    """What a session parked in ``state``, whose ``stage`` accepts ``kinds``, waits for."""
    return {"state": state.lifecycle.name, "stage": stage, "accepts": kinds}


class Inbox:
    """One session's inbox, for its supervisor."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        self.session = session

    async def receive(self, stage_type: type[Any], state: AgentState) -> Delivery | None:
        """The message the stage of ``state`` applies next; ``None`` once the session parked."""
        session = self.session
        persistence = session.persistence
        if persistence is None:
            raise ConfigurationError(
                f"session {session.session_id!r} waits for messages in "
                f"{state_label(state.lifecycle)!r}, which needs a store: pass "
                "store=MemoryStore() (or a file) to the AgentSystem"
            )
        store = persistence.store
        # Stored messages may carry a kind's older name (its class name): read by both.
        kinds: dict[str, type[BaseModel]] = stage_type.received()
        accepts = sorted(kinds)
        named = sorted(stage_type.kinds())
        while True:
            now = session.clock.now()
            pending = sorted(await store.pending(session.session_id), key=_position)
            for stored in pending:
                if stored.kind in kinds and stored.due_at <= now:
                    message = _decoded(kinds[stored.kind], stored, persistence.keyring)
                    return Delivery(stored, message)
            parked = await store.park(
                session.session_id,
                persistence.owner,
                status=ExitReason.WAITING.value,
                waiting=waiting_for(state, stage_type.name, named),
                accepts=accepts,
                now=now,
            )
            if parked:
                session.finish(ExitReason.WAITING)
                return None
            # A message of an accepted kind arrived meanwhile: receive it.

    def mail(self, delivery: Delivery | None, timers: list[ScheduledMessage] | None) -> Mail | None:
        """What the commit of a step that applied ``delivery`` and set ``timers`` carries.

        ``None``: nothing (no message applied, no child's end, no timer).
        """
        if delivery is None and timers is None and self.session.applies is None:
            return None
        applied, info = applied_info(self.session)  # a child's end, if the step takes one
        if delivery is not None:
            stored = delivery.stored
            applied = stored.position
            info["message"] = message_record(stored)
        posts: list[NewMessage] = []
        if timers:
            session = self.session
            persistence = session.persistence
            now = session.clock.now()
            described = []
            for timer in timers:
                due = timer.due(now)
                if persistence is not None and (model := self._model(timer)) is not None:
                    # Sealed as a sent message is: the inbox row and this event keep tokens.
                    sealed = seal_message(
                        model, timer.kind, timer.payload, persistence.keyring, session.session_id
                    )
                    timer = replace(timer, payload=sealed)
                posts.append(NewMessage(timer.message_id, timer.kind, timer.payload, due))
                described.append(timer.describe(due))
            info["timers"] = described
        return Mail(applied, tuple(posts), info)

    def _model(self, timer: ScheduledMessage) -> type[BaseModel] | None:
        """The pydantic class of ``timer``'s message: its own, else its kind's in the machine."""
        return timer.model or self.session.machine.messages.get(timer.kind)

    async def pause_at_gate(self, state: AgentState, stage: str) -> bool:
        """Pause, durably, if a gate guards this step; return true if it did.

        The pause is an event; with a store, the same write parks the session
        as ``"paused"``, waiting for a decision (`Approve`, `Abort`, `Edit`), and
        gives its lease up.
        """
        session = self.session
        if session.gates_passed:
            session.gates_passed = False  # the step a human just let through
            return False
        for gate in session.machine.gates:
            try:
                triggered = gate.triggers(state, stage, session.gate_commits)
            except Exception as exc:
                _logger.error("gate_check_failed", session_id=session.session_id, error=repr(exc))
                triggered = True  # a broken gate pauses rather than lets through
            if not triggered:
                continue
            lifecycle = state.lifecycle
            info = self.pause_info(gate, state, stage)
            event = session.event(
                EventKind.PAUSE, stage, lifecycle, lifecycle, Patch(), frozenset(), 0, info=info
            )
            if session.persistence is not None:
                # One write: the pause event, the "paused" status and what it waits
                # for (its question), its lease given up; never one without another.
                await session.persistence.record(
                    event,
                    state,
                    status=ExitReason.PAUSED.value,
                    waiting=self.paused_waiting(gate, state, info),
                    accepts=sorted(DECISIONS),
                )
            session.commit(state, event)
            session.finish(ExitReason.PAUSED)
            _logger.info(
                "session_paused", session_id=session.session_id, gate=gate.name, stage=stage
            )
            return True
        return False

    def pause_info(self, gate: Gate, state: AgentState, stage: str) -> dict[str, Any]:
        """What the event of a pause at ``gate`` before ``stage`` records (with its question)."""
        info: dict[str, Any] = {"gate": gate.name, "stage": stage}
        try:
            question = gate.ask(state)
            check_json(json_data(question))
        except Exception as exc:  # a broken question still pauses: it is shown as the error
            question = f"(the gate's question failed: {exc!r})"
        if question is not None:  # a secret it quotes (a sensitive value held) is masked
            info["question"] = scrub_data(json_data(question))
        return info

    def paused_waiting(self, gate: Gate, state: AgentState, info: dict[str, Any]) -> dict[str, Any]:
        """What the session paused at ``gate`` waits for: a decision, of what answer."""
        return {
            **info,
            "state": state.lifecycle.name,
            "field": gate.field,
            "answer": gate.answer_schema(),
            "accepts": sorted(DECISIONS),
        }

    def unstored(self) -> Exception:
        """The failure of a step that scheduled a timer in a session kept without a store."""
        return Fatal(
            f"session {self.session.session_id!r}: schedule() posts a timer to the session's "
            "inbox, which needs a store; pass store=MemoryStore() (or a file) to the AgentSystem"
        )


def _position(message: StoredMessage) -> int:
    return message.position


def _decoded(kind: type[BaseModel], stored: StoredMessage, keyring: Keyring | None) -> BaseModel:
    """The message ``stored`` holds, as its kind (checked when sent), its sealed fields opened.

    Raises:
        KeyringError: If a field is sealed and the keyring cannot open it.
        Fatal: If it no longer fits its kind.
    """
    payload = open_message(kind, stored.kind, stored.payload, keyring, stored.session_id)
    try:
        return kind.model_validate(payload)
    except ValidationError as exc:
        raise Fatal(
            f"message {stored.message_id!r} of session {stored.session_id!r} no longer fits "
            f"its kind {stored.kind!r}: {exc.errors(include_url=False)}"
        ) from exc
