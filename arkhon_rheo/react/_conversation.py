"""`Conversation`: a thread with a conversational agent, as a service writes it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio

from .._errors import (
    ConfigurationError,
    SessionBusy,
    SessionError,
    SessionLocked,
    SessionNotFound,
)
from ..protocols import AssistantMessage, Partial, ReplyDelta, UserMessage
from ._listen import Close, UserInput
from ._state import StopReason

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ..protocols import Machine
    from ._state import ReactState

#: The exits of a turn that answered (or closed): any other is an error for `say`.
_ANSWERING = frozenset({StopReason.ANSWERED, StopReason.BUDGET_EXHAUSTED, StopReason.CLOSED})

__all__ = ["Conversation", "Said"]


class Driver(Protocol):
    """What a `Conversation` needs of its agent system (an ``AgentSystem``).

    The engine sits below the system layer, so it names only these calls.
    """

    async def start(
        self, machine: Machine[Any], state: Any, *, session_id: str | None = None
    ) -> Any:
        """Start a session; return its handle."""
        ...

    async def send(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
    ) -> Any:
        """Send a message to a session; return where it went."""
        ...

    async def ask(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the system's
        on_busy: str = "enqueue",
    ) -> Any:
        """Send a message and return the session's reply to it."""
        ...

    def ask_stream(
        self,
        machine: Machine[Any],
        session_id: str,
        message: object,
        *,
        message_id: str | None = None,
        timeout: float | None = None,
        on_busy: str = "enqueue",
    ) -> AsyncIterator[Any]:
        """Ask, yielding the reply's partial output, then the reply."""
        ...

    def stored(self, machine: Machine[Any], session_id: str) -> Any:
        """The session as the store keeps it."""
        ...


@dataclass(frozen=True, slots=True)
class Said:
    """One message of a conversation's transcript.

    Attributes:
        role: Who said it: ``"user"`` or ``"assistant"``.
        text: What was said.
    """

    role: Literal["user", "assistant"]
    text: str


class Conversation:
    """A thread with a conversational agent (``react_agent(..., conversational=True)``).

    ::

        chat = await Conversation.open(system, agent, "thread-42")  # get or create
        print(await chat.say("What is 2 + 3?"))
        async for delta in chat.stream("And times 3?"):
            print(delta, end="")
        print(await chat.transcript())

    Each turn is a message asked of the session (`AgentSystem.ask`): stored
    first, applied once, in the order the inbox took it, and answered with
    the reply to *that* message, whoever drives the session (this process,
    another one on the same store, a worker). Any number of callers, in any
    number of processes, may talk to one thread at once: their messages
    queue and each gets its own reply. Between turns the session is parked
    in the store, holding no memory.

    Args:
        system: The agent system (with a store).
        agent: The conversational agent's machine.
        session_id: The thread to go on with (`open` gets or creates one by id).

    Raises:
        ConfigurationError: If ``agent`` is not conversational.
    """

    __slots__ = ("agent", "session_id", "system")

    def __init__(
        self, system: Driver, agent: Machine[Any], *, session_id: str | None = None
    ) -> None:
        if "user_input" not in getattr(agent, "messages", {}):
            raise ConfigurationError(
                f"machine {getattr(agent, 'name', agent)!r} does not converse: build it with "
                "react_agent(..., conversational=True)"
            )
        self.system = system
        self.agent = agent
        self.session_id = session_id

    @classmethod
    async def open(
        cls,
        system: Driver,
        agent: Machine[Any],
        thread_id: str | None = None,
        *,
        state: ReactState | None = None,
    ) -> Conversation:
        """The thread ``thread_id``: the one stored, or a new one waiting for its first message.

        Safe for concurrent callers, here and in other processes: one of them
        creates the thread, every one gets it.

        Args:
            system: The agent system (with a store).
            agent: The conversational agent's machine.
            thread_id: The thread's id (a fresh one by default).
            state: A new thread's initial state, if not a plain `ReactState`
                (its ``task`` is ignored: the first message is the first `say`).

        Raises:
            ConfigurationError: If ``agent`` is not conversational.
        """
        chat = cls(system, agent, session_id=thread_id or uuid.uuid4().hex)
        await chat._get_or_create(state)
        return chat

    async def _get_or_create(self, state: ReactState | None) -> None:
        stored = self.system.stored(self.agent, self._id())
        initial = (state or self.agent.state_type()).model_copy(update={"task": ""})
        wait = 0.002
        while True:
            try:
                await stored.record()
                return
            except SessionNotFound:
                pass
            try:
                await self.system.start(self.agent, initial, session_id=self.session_id)
                return
            except (SessionBusy, SessionLocked):
                pass  # another caller is creating it (here, or in another process)
            except SessionError as exc:
                if "exists already" not in str(exc):
                    raise
            await anyio.sleep(wait)  # until its record is there
            wait = min(wait * 2, 0.1)

    async def start(self, text: str, *, state: ReactState | None = None) -> str:
        """Start the conversation with the user's first message; return the agent's reply.

        Args:
            text: The first message (the agent's ``task``).
            state: The initial state, if not a plain `ReactState` (its task is set to ``text``).
        """
        initial = (state or self.agent.state_type()).model_copy(update={"task": text})
        handle = await self.system.start(self.agent, initial, session_id=self.session_id)
        self.session_id = handle.session_id
        return _reply(await handle.result())

    async def say(
        self,
        text: str,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - ask's
        on_busy: str = "enqueue",
    ) -> str:
        """Ask the user's next message; return the agent's reply to it.

        Args:
            text: The message.
            message_id: Its id: asking again with it returns the same reply and
                applies nothing twice.
            timeout: The longest wait for the reply, in seconds.
            on_busy: While a turn runs: ``"enqueue"`` (wait for it), ``"reject"``
                or ``"interrupt"`` (see `AgentSystem.send`).

        Raises:
            SessionError: If the conversation was not started, or the turn
                failed (the agent's error).
            NoReply: If ``timeout`` ran out (the message stays; ask again by id).
        """
        reply = await self.ask(text, message_id=message_id, timeout=timeout, on_busy=on_busy)
        return _text(reply)

    async def ask(
        self,
        text: str,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the system's
        on_busy: str = "enqueue",
    ) -> Any:
        """As `say`, but return the whole `Reply` (the state at the end of the turn)."""
        return await self.system.ask(
            self.agent,
            self._id(),
            UserInput(text=text),
            message_id=message_id,
            timeout=timeout,
            on_busy=on_busy,
        )

    async def stream(
        self,
        text: str,
        *,
        message_id: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - ask's
    ) -> AsyncIterator[str]:
        """Ask the user's next message; yield the reply's text as the model writes it.

        When this process drives the turn, the model's deltas arrive as it
        streams them (with a model client that streams); otherwise, or with
        one that does not, the whole reply comes as one piece at the end.

        Raises:
            SessionError: If the turn failed.
        """
        streamed = False
        async for item in self.system.ask_stream(
            self.agent, self._id(), UserInput(text=text), message_id=message_id, timeout=timeout
        ):
            if isinstance(item, Partial):
                if isinstance(item.data, ReplyDelta) and item.stage == "think" and item.data.text:
                    streamed = True
                    yield item.data.text
                continue
            answer = _text(item)
            if not streamed and answer:
                yield answer

    async def transcript(self) -> list[Said]:
        """The thread's messages so far, in order: the user's and the agent's answers.

        Tool calls and their results, and the system prompt, are left out.
        """
        state = await self.system.stored(self.agent, self._id()).state()
        said: list[Said] = []
        for message in state.messages:
            if isinstance(message, UserMessage):
                said.append(Said("user", message.content))
            elif (
                isinstance(message, AssistantMessage)
                and message.content
                and not (message.tool_calls)
            ):
                said.append(Said("assistant", message.content))
        return said

    async def close(self) -> None:
        """End the conversation: the session finishes, its last answer kept."""
        await self.system.ask(self.agent, self._id(), Close())

    def _id(self) -> str:
        if self.session_id is None:
            raise SessionError(
                "this conversation has not started: call start(text) first, or get it "
                "with Conversation.open(system, agent, thread_id)",
                session_id="",
            )
        return self.session_id


def _text(reply: Any) -> str:
    """The agent's answer in ``reply``, or the error of a turn that went wrong."""
    state = reply.state
    if reply.status == "failed" or reply.interrupted:
        why = "interrupted by a later message" if reply.interrupted else reply.status
        failure = getattr(state, "last_error", None)
        raise SessionError(
            f"conversation {reply.session_id!r}: the turn of message {reply.message_id!r} "
            f"ended {why}{f': {failure}' if failure else ''}",
            session_id=reply.session_id,
        )
    if not state.answer and state.exit not in _ANSWERING:
        raise SessionError(
            f"conversation {reply.session_id!r}: the turn of message {reply.message_id!r} "
            f"ended without an answer ({getattr(state.exit, 'value', state.exit)}); the "
            "conversation waits for the next message",
            session_id=reply.session_id,
        )
    return str(state.answer or "")


def _reply(result: Any) -> str:
    """The agent's answer in ``result``, or the error of a turn that went wrong."""
    if not result.ok:
        failure = result.failure
        why = failure.message if failure is not None else result.exit_reason.value
        raise SessionError(
            f"conversation {result.session_id!r} ended {result.exit_reason.value}: {why}",
            session_id=result.session_id,
        )
    return str(result.state.answer or "")
