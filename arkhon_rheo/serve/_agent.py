"""One agent served over A2A: the protocol's methods, as asks of the agent's sessions.

An A2A context is a session; a task is the turn one message began (see
`_tasks`). ``SendMessage`` is `AgentSystem.ask`; ``SendStreamingMessage`` is
`AgentSystem.ask_stream`, its partial output sent as artifact updates;
``GetTask`` and ``SubscribeToTask`` read the store; ``CancelTask`` cuts the
turn at its next commit. A message that names an ``input-required`` task
answers its gate.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

import anyio
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as a2a_errors

from .._errors import (
    ConfigurationError,
    InboxFull,
    MessageRefused,
    NoReply,
    SessionBusy,
    SessionError,
    SessionLocked,
    SessionNotFound,
)
from .._lru import LRU
from ..protocols import Partial
from ._tasks import CANCEL, FINAL, TaskView, message_parts, parse_task_id, value_parts

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..system import AgentSystem
    from ._served import Served

__all__ = ["Agent", "protocol_error"]

#: The longest wait between two reads of a task's state while following it, in seconds.
_FOLLOW_POLL = 0.5
#: How long a cancel waits for the turn it cut to end, in seconds.
_CANCEL_WAIT = 30.0


def _refused(text: str) -> a2a_errors.A2AError:
    return a2a_errors.InvalidParamsError(text)


class Agent:
    """The A2A methods of one served agent over an `AgentSystem`."""

    def __init__(self, system: AgentSystem, served: Served, reply_timeout: float) -> None:
        self.system = system
        self.machine = served.machine
        self.served = served
        self.reply_timeout = reply_timeout
        self._known: LRU[str, bool] = LRU(4096)  # sessions seen to exist: a cache, not a record

    # -- messages -----------------------------------------------------------------------

    def _message_of(self, message: pb.Message) -> Any:
        """The A2A message as one of the machine's messages (checked again when sent)."""
        try:
            text, data = message_parts(message)
        except ValueError as exc:
            raise _refused(str(exc)) from None
        if isinstance(data, dict):
            return data
        if text is None or not text.strip():
            raise _refused("a message needs a text part or a data part (a JSON object)")
        if "user_input" in self.machine.messages:
            return {"kind": "user_input", "text": text}
        return {"text": text}

    async def _open(self, session_id: str) -> None:
        """Make sure the session exists: the one stored, or a new one waiting for messages."""
        if self._known.get(session_id):
            return
        store = self.system.store
        assert store is not None  # a2a_app checked
        wait = 0.002
        while True:
            try:
                record = await store.record(session_id)
            except SessionNotFound:
                pass
            else:
                if record.machine != self.machine.name:
                    raise _refused(f"context {session_id!r} belongs to another agent")
                break
            initial = self.machine.state_type()
            if "task" in type(initial).model_fields:
                initial = initial.model_copy(update={"task": ""})
            try:
                # Asked at once: a stream follows the turn into whichever run takes it,
                # should this first run park on its way without taking the message.
                await self.system.start(self.machine, initial, session_id=session_id)
                break
            except (SessionBusy, SessionLocked):
                pass  # another request (or replica) is creating it
            except SessionError as exc:
                if "exists already" not in str(exc):
                    raise
            await anyio.sleep(wait)
            wait = min(wait * 2, 0.1)
        self._known.put(session_id, True)

    async def _view(self, task: str) -> TaskView:
        named = parse_task_id(task)
        view = None
        if named is not None:
            view = await TaskView.read(self.system, self.machine, *named)
        if view is None:
            raise a2a_errors.TaskNotFoundError(f"no task {task!r} of agent {self.machine.name!r}")
        return view

    async def _answered(self, view: TaskView, message: pb.Message) -> None:
        """Send the gate's answer that ``message`` carries to the task's paused session."""
        if view.state != pb.TASK_STATE_INPUT_REQUIRED:
            state = pb.TaskState.Name(view.state)
            raise _refused(
                f"task {view.id!r} is {state}, not input-required: send a new message "
                "(no taskId) in its context to go on"
            )
        text, data = message_parts(message)
        decision: Any
        if isinstance(data, dict):
            decision = data
        elif text is not None and text.strip().lower() in ("approve", "abort"):
            decision = {"kind": text.strip().lower()}
        elif text is not None and (view.question or {}).get("field"):
            decision = {"kind": "approve", "value": _loose_json(text)}
        else:
            raise _refused(
                "answer the gate with 'approve' or 'abort', or a data part such as "
                '{"kind": "approve", "value": ...}'
            )
        if not isinstance(decision, dict) or decision.get("kind") not in (
            "approve",
            "abort",
            "edit",
        ):
            raise _refused("a gate's answer is a decision: kind 'approve', 'abort' or 'edit'")
        await self.system.send(
            self.machine, view.session_id, decision, message_id=message.message_id
        )

    # -- the protocol's methods ---------------------------------------------------------

    async def send(self, request: pb.SendMessageRequest) -> pb.SendMessageResponse:
        """``SendMessage``: ask, and answer with the task as the turn left it."""
        message = _checked(request.message)
        if message.task_id:
            view = await self._view(message.task_id)
            await self._answered(view, message)
            view = await self._until_final(view, self.reply_timeout, past=view.seq)
            return pb.SendMessageResponse(task=view.task())
        session_id = message.context_id or uuid.uuid4().hex
        said = self._message_of(message)
        await self._open(session_id)
        if request.configuration.return_immediately:
            await self.system.send(self.machine, session_id, said, message_id=message.message_id)
            view = await self._view_of(session_id, message.message_id)
            return pb.SendMessageResponse(task=view.task())
        try:
            reply = await self.system.ask(
                self.machine,
                session_id,
                said,
                message_id=message.message_id,
                timeout=self.reply_timeout,
            )
        except NoReply as exc:
            if not exc.timed_out:
                raise
            view = await self._view_of(session_id, message.message_id)
            return pb.SendMessageResponse(task=view.task())
        return pb.SendMessageResponse(task=(await self._of_reply(reply, said)).task())

    async def _of_reply(self, reply: Any, said: Any) -> TaskView:
        waiting = None
        if reply.status == "paused":
            waiting = (await self.system.stored(self.machine, reply.session_id).record()).waiting
        return TaskView.of_reply(reply, said, waiting)

    async def _view_of(self, session_id: str, message_id: str) -> TaskView:
        view = await TaskView.read(self.system, self.machine, session_id, message_id)
        if view is None:  # pragma: no cover - just stored
            raise a2a_errors.InternalError("the message just stored is not found")
        return view

    async def stream(self, request: pb.SendMessageRequest) -> AsyncIterator[pb.StreamResponse]:
        """``SendStreamingMessage``: the task, its deltas as artifact updates, its end."""
        message = _checked(request.message)
        if message.task_id:
            view = await self._view(message.task_id)
            await self._answered(view, message)
            async for event in self.follow(view, past=view.seq):
                yield event
            return
        session_id = message.context_id or uuid.uuid4().hex
        said = self._message_of(message)
        await self._open(session_id)
        submitted = TaskView(session_id, message.message_id, pb.TASK_STATE_SUBMITTED, said=said)
        yield pb.StreamResponse(task=submitted.task())
        working = submitted._with(pb.TASK_STATE_WORKING)
        yield _status(working)
        streamed = False
        async for item in self.system.ask_stream(
            self.machine, session_id, said, message_id=message.message_id
        ):
            if isinstance(item, Partial):
                text = getattr(item.data, "text", None)
                if isinstance(text, str) and text:
                    yield _delta(working, [pb.Part(text=text)], append=streamed)
                    streamed = True
                continue
            view = await self._of_reply(item, said)
            if view.state == pb.TASK_STATE_COMPLETED and view.value is not None:
                parts = [] if streamed else value_parts(view.value)
                yield _delta(working, parts, append=streamed, last=True)
            yield _status(view)

    async def get(self, request: pb.GetTaskRequest) -> pb.Task:
        """``GetTask``: the task, read from the store."""
        return (await self._view(request.id)).task()

    async def subscribe(
        self, request: pb.SubscribeToTaskRequest
    ) -> AsyncIterator[pb.StreamResponse]:
        """``SubscribeToTask``: the task, then each change of its state, read from the store."""
        view = await self._view(request.id)
        async for event in self.follow(view):
            yield event

    async def follow(
        self, view: TaskView, *, past: int | None = None
    ) -> AsyncIterator[pb.StreamResponse]:
        """The task, then its status each time it changes, until it is final.

        ``past``: the pause of a gate just answered; the task is followed on
        from there (its state then is not final).
        """
        if past is None:
            yield pb.StreamResponse(task=view.task())
        seen, interval = (view.state if past is None else None), 0.01
        while True:
            stale = past is not None and view.seq == past
            if view.state != seen and not stale:
                seen = view.state
                if view.state in FINAL and view.artifact() is not None:
                    yield _delta(view, value_parts(view.value), append=False, last=True)
                yield _status(view)
            if view.state in FINAL and not stale:
                return
            await anyio.sleep(interval)
            interval = min(interval * 1.5, _FOLLOW_POLL)
            view = await self._view(view.id)

    async def _until_final(
        self,
        view: TaskView,
        timeout: float,  # noqa: ASYNC109 - a wait for the task, not a scope
        past: int | None = None,
    ) -> TaskView:
        """The task once final (past the pause ``past``), or as it is after ``timeout`` s."""
        interval = 0.01
        with anyio.move_on_after(timeout):
            while True:
                view = await self._view(view.id)
                if view.state in FINAL and not (past is not None and view.seq == past):
                    return view
                await anyio.sleep(interval)
                interval = min(interval * 1.5, _FOLLOW_POLL)
        return view

    async def cancel(self, request: pb.CancelTaskRequest) -> pb.Task:
        """``CancelTask``: cut the task's turn at its next commit, then answer with the task."""
        view = await self._view(request.id)
        if view.state in FINAL:
            state = pb.TaskState.Name(view.state)
            why = "answer its gate with abort" if "INPUT" in state else "it is over"
            raise a2a_errors.TaskNotCancelableError(f"task {view.id!r} is {state}: {why}")
        if view.state != pb.TASK_STATE_WORKING or not self.system.interrupt(
            view.session_id, by=f"{CANCEL}{uuid.uuid4().hex}"
        ):
            raise a2a_errors.TaskNotCancelableError(
                f"task {view.id!r} is not running in this server (queued, or driven by another "
                "process): cancel it where it runs"
            )
        return (await self._until_final(view, _CANCEL_WAIT)).task()


def _checked(message: pb.Message) -> pb.Message:
    if not message.message_id:
        raise _refused("the message needs a messageId")
    if message.role == pb.ROLE_AGENT:
        raise _refused("the message must be the user's (role ROLE_USER)")
    return message


def _status(view: TaskView) -> pb.StreamResponse:
    update = pb.TaskStatusUpdateEvent(
        task_id=view.id, context_id=view.session_id, status=view.status()
    )
    return pb.StreamResponse(status_update=update)


def _delta(
    view: TaskView, parts: list[pb.Part], *, append: bool, last: bool = False
) -> pb.StreamResponse:
    artifact = pb.Artifact(artifact_id="reply", name="reply", parts=parts)
    update = pb.TaskArtifactUpdateEvent(
        task_id=view.id,
        context_id=view.session_id,
        artifact=artifact,
        append=append,
        last_chunk=last,
    )
    return pb.StreamResponse(artifact_update=update)


def _loose_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


#: The library's errors a request may meet, as the protocol's.
def protocol_error(exc: Exception) -> a2a_errors.A2AError | None:
    """The A2A error for a library error (``None``: not one a request should meet)."""
    if isinstance(exc, a2a_errors.A2AError):
        return exc
    if isinstance(exc, (MessageRefused, ConfigurationError)):
        return a2a_errors.InvalidParamsError(str(exc))
    if isinstance(exc, SessionBusy | SessionLocked | InboxFull):
        return a2a_errors.UnsupportedOperationError(str(exc))
    if isinstance(exc, SessionNotFound):
        return a2a_errors.TaskNotFoundError(str(exc))
    if isinstance(exc, NoReply):
        return a2a_errors.InternalError(str(exc))
    return None
