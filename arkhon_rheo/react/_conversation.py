"""`Conversation`: turns with a conversational agent, as a caller writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._errors import ConfigurationError, SessionError
from ._listen import Close, UserInput

if TYPE_CHECKING:
    from ..protocols import Machine
    from ._state import ReactState

__all__ = ["Conversation"]


class Driver(Protocol):
    """What a `Conversation` needs of its agent system (an ``AgentSystem``).

    The engine sits below the system layer, so it names only these two calls.
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
        """Send a message to a session; return where it went (its ``handle``)."""
        ...


class Conversation:
    """A conversation with a conversational agent (``react_agent(..., conversational=True)``).

    ::

        chat = Conversation(system, agent)
        print(await chat.start("What is 2 + 2?"))
        print(await chat.say("And times 3?"))
        await chat.close()

    Each turn is a message sent to the session (`AgentSystem.send`): stored
    first, applied once, kept in its history. Between turns the session is
    parked in the store, holding no memory; another process (or a later run of
    this one) may go on with ``Conversation(system, agent, session_id=...)``.

    Args:
        system: The agent system (with a store).
        agent: The conversational agent's machine.
        session_id: The conversation to go on with (`start` makes a new one).

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

    async def say(self, text: str, *, message_id: str | None = None) -> str:
        """Send the user's next message; return the agent's reply to it.

        Args:
            text: The message.
            message_id: Its id (a re-send of the same id stores nothing).

        Raises:
            SessionError: If the conversation was not started, another process
                drives it now, or the agent failed.
        """
        sent = await self.system.send(
            self.agent, self._id(), UserInput(text=text), message_id=message_id
        )
        return _reply(await self._result(sent.handle))

    async def close(self) -> None:
        """End the conversation: the session finishes, its last answer kept."""
        sent = await self.system.send(self.agent, self._id(), Close())
        if sent.handle is not None:
            await sent.handle.result()

    def _id(self) -> str:
        if self.session_id is None:
            raise SessionError(
                "this conversation has not started: call start(text) first", session_id=""
            )
        return self.session_id

    async def _result(self, handle: Any) -> Any:
        if handle is None:
            raise SessionError(
                f"conversation {self.session_id!r} is driven by another process now; "
                "its reply is in the store when it parks",
                session_id=self._id(),
            )
        return await handle.result()


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
