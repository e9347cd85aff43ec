"""A2A tasks, read from the store: a task is the turn one message of a session began.

A task's id names its session and its message (`task_id`, `parse_task_id`),
so any replica on the store answers for any task: nothing about a task is
kept in one process's memory. Its state is read from the session's inbox and
log (`TaskView.read`): the message not yet applied is ``submitted``; applied,
the turn under way is ``working``; the turn's end decides the rest:
``completed`` (the session waits for its next message, or finished),
``input-required`` (paused at a gate, the gate's question its status
message; the turn goes on once the gate is answered), ``failed``, or
``canceled`` (the turn was cut).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from .._errors import SessionNotFound
from ..protocols import EventKind

if TYPE_CHECKING:
    from ..protocols import Machine, StoredMessage, TransitionEvent
    from ..system import AgentSystem, Reply

__all__ = ["FINAL", "TaskView", "message_parts", "parse_task_id", "task_id"]

#: The states in which a task no longer changes by itself (input-required waits for the client).
FINAL = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
        pb.TASK_STATE_INPUT_REQUIRED,
    }
)
#: How a session that ended without an event of the turn's own maps to a task state.
_ENDED = {"finished": pb.TASK_STATE_COMPLETED, "failed": pb.TASK_STATE_FAILED}
#: The prefix of a cancel's id in the rollback that cut its turn.
CANCEL = "a2a-cancel:"


def task_id(session_id: str, message_id: str) -> str:
    """The id of the task message ``message_id`` of session ``session_id`` began."""
    raw = json.dumps([session_id, message_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_task_id(task: str) -> tuple[str, str] | None:
    """The session and message a task id names; ``None`` if it is none of ours."""
    try:
        raw = base64.urlsafe_b64decode(task + "=" * (-len(task) % 4))
        session_id, message_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        return None
    if not (isinstance(session_id, str) and isinstance(message_id, str)):
        return None
    if not (session_id and message_id):
        return None
    return session_id, message_id


def rest_of(machine: Machine[Any], event: TransitionEvent) -> str | None:
    """Where ``event`` leaves the session at rest, if it does (``None``: the turn goes on)."""
    info = event.info or {}
    if event.kind is EventKind.ROLLBACK and info.get("interrupted_by"):
        return "canceled"
    if event.kind is EventKind.PAUSE:
        return "paused"
    if event.to_state in machine.terminal:
        return "failed" if event.to_state is machine.failed else "finished"
    return "waiting" if machine.waits_in(event.to_state) else None


_STATES = {
    "waiting": pb.TASK_STATE_COMPLETED,
    "finished": pb.TASK_STATE_COMPLETED,
    "paused": pb.TASK_STATE_INPUT_REQUIRED,
    "failed": pb.TASK_STATE_FAILED,
    "canceled": pb.TASK_STATE_CANCELED,
}


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as the store has it.

    Attributes:
        session_id: Its session (the A2A context).
        message_id: The message that began it.
        state: Its `TaskState`.
        said: The message's payload, as stored (``None``: not known).
        value: What the machine answered (completed tasks).
        note: The status message's text: the gate's question, the failure, the cut.
        question: The gate's question and answer type (input-required tasks).
        seq: The event the task rests at (its pause, for an input-required one).
    """

    session_id: str
    message_id: str
    state: int
    said: Any = None
    value: Any = None
    note: str | None = None
    question: Any = None
    seq: int = 0

    @property
    def id(self) -> str:
        """The task's id."""
        return task_id(self.session_id, self.message_id)

    @classmethod
    async def read(
        cls, system: AgentSystem, machine: Machine[Any], session_id: str, message_id: str
    ) -> TaskView | None:
        """The task of ``message_id`` in session ``session_id``; ``None``: no such task here."""
        store = system.store
        if store is None:
            return None
        try:
            record = await store.record(session_id)
        except SessionNotFound:
            return None
        if record.machine != machine.name:
            return None
        stored = system.stored(machine, session_id)
        found = _find(await store.messages(session_id), message_id)
        if found is None:
            return None
        base = cls(session_id, message_id, pb.TASK_STATE_SUBMITTED, said=found.payload)
        if found.applied_seq is None:
            if record.status in _ENDED or record.status in ("aborted", "max_steps"):
                note = f"the session ended ({record.status}) before it applied the message"
                return base._with(pb.TASK_STATE_FAILED, note=note)
            return base
        for event in await stored.history():
            if event.seq < found.applied_seq:
                continue
            rest = rest_of(machine, event)
            if rest is None or (rest == "paused" and event.seq < record.last_seq):
                continue  # the turn goes on (a gate answered since)
            if rest == "paused":
                waiting = record.waiting or dict(event.info or {})
                return base._with(
                    pb.TASK_STATE_INPUT_REQUIRED,
                    note=_question_text(waiting.get("question")),
                    question=_gate_of(waiting),
                    seq=event.seq,
                )
            ended: TaskView = base._ended(machine, rest, event, await stored.state(event.seq))
            return ended
        if record.status in ENDED_STATUSES:  # out of steps, aborted: no event of the turn's own
            state = await stored.state()
            note = f"the session ended ({record.status}): {getattr(state, 'last_error', '')}"
            return base._with(_ENDED.get(record.status, pb.TASK_STATE_FAILED), note=note)
        return base._with(pb.TASK_STATE_WORKING)

    @classmethod
    def of_reply(cls, reply: Reply[Any], said: Any, waiting: Any = None) -> TaskView:
        """The task of an asked message, from its reply (``waiting``: the paused record's)."""
        base = cls(reply.session_id, reply.message_id, pb.TASK_STATE_WORKING, said=said)
        if reply.interrupted:
            return base._with(pb.TASK_STATE_CANCELED, note="the turn was cut")
        if reply.status == "paused":
            waiting = waiting or {}
            return base._with(
                pb.TASK_STATE_INPUT_REQUIRED,
                note=_question_text(waiting.get("question")),
                question=_gate_of(waiting),
                seq=reply.seq,
            )
        if reply.status in ("waiting", "finished"):
            return base._with(pb.TASK_STATE_COMPLETED, value=reply.value)
        error = getattr(reply.state, "last_error", None)
        return base._with(pb.TASK_STATE_FAILED, note=f"the turn ended {reply.status}: {error}")

    def _ended(
        self, machine: Machine[Any], rest: str, event: TransitionEvent, state: Any
    ) -> TaskView:
        if rest == "canceled":
            by = str((event.info or {}).get("interrupted_by", ""))
            why = "canceled" if by.startswith(CANCEL) else f"cut by message {by!r}"
            return self._with(pb.TASK_STATE_CANCELED, note=why)
        if rest == "failed":
            error = getattr(state, "last_error", None)
            return self._with(pb.TASK_STATE_FAILED, note=f"the session failed: {error}")
        value = machine.reply(state) if machine.reply is not None else None
        return self._with(_STATES[rest], value=value)

    def _with(self, state: int, **fields: Any) -> TaskView:
        return TaskView(self.session_id, self.message_id, state, self.said, **fields)

    # -- as the protocol's types --------------------------------------------------------

    def status(self) -> pb.TaskStatus:
        """The task's status: its state, with a message from the agent where it has one."""
        status = pb.TaskStatus(state=self.state)  # type: ignore[arg-type]
        status.timestamp.GetCurrentTime()
        parts = []
        if self.state == pb.TASK_STATE_COMPLETED and self.value is not None:
            parts = value_parts(self.value)
        elif self.note:
            parts = [pb.Part(text=self.note)]
        if self.question is not None:
            parts.append(_data_part(self.question))
        if parts:
            status.message.CopyFrom(
                pb.Message(
                    message_id=f"{self.id}-status",
                    context_id=self.session_id,
                    task_id=self.id,
                    role=pb.ROLE_AGENT,
                    parts=parts,
                )
            )
        return status

    def artifact(self) -> pb.Artifact | None:
        """The reply, as the task's artifact (completed tasks that answered)."""
        if self.state != pb.TASK_STATE_COMPLETED or self.value is None:
            return None
        return pb.Artifact(artifact_id="reply", name="reply", parts=value_parts(self.value))

    def task(self) -> pb.Task:
        """The task, as `GetTask` answers it."""
        task = pb.Task(id=self.id, context_id=self.session_id, status=self.status())
        if self.said is not None:
            task.history.append(
                pb.Message(
                    message_id=self.message_id,
                    context_id=self.session_id,
                    task_id=self.id,
                    role=pb.ROLE_USER,
                    parts=said_parts(self.said),
                )
            )
        artifact = self.artifact()
        if artifact is not None:
            task.artifacts.append(artifact)
        return task


#: The statuses of a session that ended.
ENDED_STATUSES = frozenset({"finished", "failed", "aborted", "max_steps", "cancelled"})


def _find(messages: tuple[StoredMessage, ...], message_id: str) -> StoredMessage | None:
    for message in messages:
        if message.message_id == message_id:
            return message
    return None


def _question_text(question: Any) -> str:
    if question is None:
        return "a gate asks for a decision: approve or abort"
    return question if isinstance(question, str) else json.dumps(question)


def _gate_of(waiting: Any) -> dict[str, Any]:
    keys = ("gate", "question", "field", "answer")
    return {key: waiting.get(key) for key in keys if waiting.get(key) is not None}


def _data_part(value: Any) -> pb.Part:
    part = pb.Part(media_type="application/json")
    json_format.ParseDict(value, part.data)
    return part


def value_parts(value: Any) -> list[pb.Part]:
    """An answer as parts: text as text, anything else as JSON data."""
    if isinstance(value, str):
        return [pb.Part(text=value, media_type="text/plain")]
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return [_data_part(value)]


def said_parts(payload: Any) -> list[pb.Part]:
    """A stored message's payload as the parts of the user's message."""
    if isinstance(payload, dict) and set(payload) <= {"text", "kind"} and "text" in payload:
        return [pb.Part(text=str(payload["text"]))]
    return [_data_part(payload)]


def message_parts(message: pb.Message) -> tuple[str | None, Any]:
    """A message's text (its text parts, joined) and its data (its one data part)."""
    texts = [part.text for part in message.parts if part.WhichOneof("content") == "text"]
    data = [
        json_format.MessageToDict(part.data)
        for part in message.parts
        if part.WhichOneof("content") == "data"
    ]
    if len(data) > 1:
        raise ValueError("a message carries at most one data part")
    return ("\n".join(texts) if texts else None), (data[0] if data else None)
