"""What a session receives: `Receive` stages, message kinds, `schedule`, and the `Clock`.

A session has a durable inbox. A state whose stage is a `Receive` stage is a
*waiting* state: the supervisor hands that stage the first pending message
(in the order the inbox took them; a timer once it is due) whose kind the stage accepts, and
commits the patch it proposes like any step's. With no such message due, the
session parks: it gives up its lease and its memory, and wakes when one
arrives or a timer falls due. Messages of other kinds wait in the inbox for a
state that accepts them (a selective receive, as in Erlang).

A message kind is a pydantic model; its name is the class's name unless the
class says otherwise in a ``kind`` class variable. A timer is a message a
stage posts to its own session, due later: `schedule` records it with the
step, and the store keeps it with the step's commit, in one transaction.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

import anyio
from pydantic import BaseModel

from .._errors import ConfigurationError
from .._hooks import RECORDER
from ._stage import Stage

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._patch import Patch
    from ._stage import StateView
    from ._state import AgentState

__all__ = [
    "Clock",
    "Receive",
    "ScheduledMessage",
    "WallClock",
    "message_kind",
    "schedule",
]

S = TypeVar("S", bound="AgentState")


def message_kind(kind: type[BaseModel]) -> str:
    """The name of message kind ``kind``: its ``kind`` class variable, or its snake_case class name.

    One rule for every kind, the library's (``user_input``, ``close``,
    ``approve``) and yours (``class PaymentReceived`` is ``payment_received``):
    the name ``{"kind": ...}`` payloads, the command line and errors use.
    """
    named = getattr(kind, "kind", None)
    return named if isinstance(named, str) and named else snake_case(kind.__name__)


def snake_case(name: str) -> str:
    """``name`` (a class's) in snake_case: ``PaymentReceived`` -> ``payment_received``."""
    return _WORD_START.sub("_", name).lower()


_WORD_START = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def legacy_kind(kind: type[BaseModel]) -> str | None:
    """The name ``kind`` had before names were snake_case (its class name), if it differs.

    Still read: in ``{"kind": ...}`` payloads, and in the inboxes of sessions
    stored before (their pending messages carry it).
    """
    named = getattr(kind, "kind", None)
    if isinstance(named, str) and named:
        return None
    return kind.__name__ if kind.__name__ != message_kind(kind) else None


class Receive(Stage[S], Generic[S]):
    """A stage that applies the messages its session receives, one per step.

    ::

        class Reply(BaseModel):
            text: str

        class AwaitReply(Receive[Chat], reads={"log"}, writes={"log"}, accepts=(Reply,)):
            async def apply(self, view, message: Reply) -> Patch:
                return Patch(log=view.log + (message.text,))

            def next(self, state: Chat) -> Phase:
                return Phase.THINKING

    Its state waits: each step applies one message (validated and checked like
    any patch, within the stage's writes), and the session parks while none of
    an accepted kind is due.

    Attributes:
        accepts: The message kinds (pydantic models) the stage applies.
        delivered: The message being applied (set by the supervisor before each
            step; `execute` hands it to `apply`).
    """

    accepts: ClassVar[tuple[type[BaseModel], ...]] = ()
    delivered: BaseModel | None = None

    def __init_subclass__(
        cls, *, accepts: Iterable[type[BaseModel]] | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if accepts is not None:
            kinds = tuple(accepts)
            for kind in kinds:
                if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
                    raise ConfigurationError(
                        f"stage {cls.name!r} accepts {kind!r}, which is not a pydantic model; "
                        "a message kind is a BaseModel subclass"
                    )
            named: dict[str, type[BaseModel]] = {}
            for kind in kinds:
                other = named.setdefault(message_kind(kind), kind)
                if other is not kind:
                    raise ConfigurationError(
                        f"stage {cls.name!r} accepts two different message kinds named "
                        f"{message_kind(kind)!r} ({other.__qualname__} and {kind.__qualname__}); "
                        "give one a `kind` class variable of its own"
                    )
            cls.accepts = kinds

    @classmethod
    def kinds(cls) -> dict[str, type[BaseModel]]:
        """The kinds the stage accepts, by name."""
        return {message_kind(kind): kind for kind in cls.accepts}

    @classmethod
    def received(cls) -> dict[str, type[BaseModel]]:
        """The kinds the stage applies from its inbox, by every name a stored message may carry.

        Each kind's name, and its class name where that differs (messages stored
        before kind names were snake_case).
        """
        names = cls.kinds()
        for kind in cls.accepts:
            legacy = legacy_kind(kind)
            if legacy is not None:
                names.setdefault(legacy, kind)
        return names

    async def execute(self, view: StateView[S]) -> Patch:
        """Apply the message the supervisor delivered (see `apply`)."""
        message = self.delivered
        if message is None:
            raise ConfigurationError(
                f"stage {self.name!r} is a Receive stage: it runs when a message is delivered"
            )
        return await self.apply(view, message)

    async def apply(self, view: StateView[S], message: Any) -> Patch:
        """Apply ``message`` to the session: return the patch it makes."""
        raise NotImplementedError(f"stage {self.name!r} must implement apply()")


@dataclass(frozen=True, slots=True)
class ScheduledMessage:
    """A message a stage asked to have delivered to its own session later (a timer).

    Attributes:
        message_id: Its id in the session's inbox.
        kind: Its kind's name.
        payload: The message as JSON data.
        after: Seconds after the step's commit it falls due (with ``at``: ``None``).
        at: When it falls due, seconds since the epoch (with ``after``: ``None``).
        model: The message's pydantic class (its `Sensitive` fields are sealed
            before the timer is stored, as a sent message's are), if known.
    """

    message_id: str
    kind: str
    payload: Any
    after: float | None
    at: float | None
    model: type[BaseModel] | None = field(default=None, repr=False, compare=False)

    def due(self, now: float) -> float:
        """When it falls due, for a step committed at ``now``."""
        return self.at if self.at is not None else now + (self.after or 0.0)

    def describe(self, due_at: float) -> dict[str, Any]:
        """The timer as JSON data, for the event that posts it."""
        return {"id": self.message_id, "kind": self.kind, "payload": self.payload, "due_at": due_at}


def _seconds(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"schedule({name}=...) takes a finite number, got {value!r}")
    return float(value)


def schedule(
    message: BaseModel,
    *,
    after: float | None = None,
    at: float | None = None,
    message_id: str | None = None,
) -> str:
    """Post ``message`` to this stage's own session, due ``after`` seconds (or ``at`` a time).

    Call it in a stage: the timer is stored with the step's commit, in the
    same transaction (a retried attempt's timers are dropped with it), its
    `Sensitive` fields sealed with the system's keyring as a sent message's are
    (a step that schedules one without a keyring fails with `KeyringError`), and
    survives a crash or a restart: whoever serves the session's machine then
    (its `AgentSystem`, or ``recover()`` in the next process) delivers it when
    it falls due, to the first state whose `Receive` stage accepts its kind.

    Args:
        message: The message (a pydantic model of a kind the machine accepts).
        after: Seconds from the step's commit (by the system's clock).
        at: A time, seconds since the epoch; give ``after`` or ``at``.
        message_id: Its id in the inbox (default: made from the step's event
            number and its order in the step, unique in the session).

    Returns:
        The timer's message id.

    Raises:
        ConfigurationError: Outside a stage, with both or neither of ``after``
            and ``at``, or if ``message`` is not a pydantic model.
    """
    recorder = RECORDER.get()
    adds = getattr(recorder, "schedule", None)
    if recorder is None or recorder.closed or adds is None:
        raise ConfigurationError(
            "schedule() posts a timer with a step's commit: call it inside a running stage"
        )
    if (after is None) == (at is None):
        raise ConfigurationError("schedule() takes either after=seconds or at=time, not both")
    if not isinstance(message, BaseModel):
        raise ConfigurationError(
            f"schedule() takes a message (a pydantic model), got {type(message).__name__}"
        )
    timer = ScheduledMessage(
        message_id or "",
        message_kind(type(message)),
        message.model_dump(mode="json"),
        _seconds("after", after),
        _seconds("at", at),
        type(message),
    )
    named: str = adds(timer)
    return named


@runtime_checkable
class Clock(Protocol):
    """What a system tells the time by, for messages and timers (seconds since the epoch)."""

    def now(self) -> float:
        """The time now."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once the time is ``deadline`` or later."""
        ...


class WallClock:
    """The machine's own clock: ``time.time()``, slept on with ``anyio.sleep``."""

    __slots__ = ()

    def now(self) -> float:
        """The time now."""
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``deadline``."""
        await anyio.sleep(max(0.0, deadline - time.time()))

    def __repr__(self) -> str:
        return "WallClock()"
