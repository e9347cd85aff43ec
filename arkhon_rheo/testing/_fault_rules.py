"""The vocabulary of fault injection: fault kinds, the calls they fire on, and their rules.

A `FaultRule` says which kind of fault fires and when; `FaultCall` is what a
seam reports of the call it is about to make; `InjectedFault` records a fault
that fired. `act` plays a rule's fault out at the seam.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import Fatal, Recoverable, StoreError, ToolTimeout, Transient
from ..protocols import AssistantMessage, ModelReply, ToolCall

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["ONLY", "FaultCall", "FaultKind", "FaultRule", "InjectedFault", "act"]


class FaultKind(enum.Enum):
    """What an injected fault does."""

    #: Raise `Transient`: the supervisor retries the stage under its backoff.
    TRANSIENT = "transient"
    #: Raise `Recoverable`: the stage restarts, the error is recorded, the session goes on.
    RECOVERABLE = "recoverable"
    #: Raise `Fatal`: the session fails.
    FATAL = "fatal"
    #: Raise an exception of your own (`FaultSchedule.raises`).
    ERROR = "error"
    #: Wait ``seconds`` (``anyio.sleep``: virtual time on trio's mock clock), then go on.
    LATENCY = "latency"
    #: Never return (until cancelled: a stage deadline, a tool timeout, the caller).
    HANG = "hang"
    #: The model answers with a tool call whose arguments are not JSON.
    MALFORMED_REPLY = "malformed_reply"
    #: The model's reply is cut in half (``finish_reason="length"``).
    TRUNCATED_REPLY = "truncated_reply"
    #: A 429: `Transient` with ``retry_after``, which the backoff waits at least.
    RATE_LIMITED = "rate_limited"
    #: The tool runs past its timeout: `ToolTimeout` (a `Transient`).
    TOOL_TIMEOUT = "tool_timeout"
    #: The store's write fails: ``StoreError("disk full")``.
    DISK_FULL = "disk_full"
    #: The store's write fails: ``StoreError("database is locked")``.
    DATABASE_LOCKED = "database_locked"


#: The fault kinds each target accepts besides the common ones.
ONLY: dict[FaultKind, str] = {
    FaultKind.MALFORMED_REPLY: "model",
    FaultKind.TRUNCATED_REPLY: "model",
    FaultKind.TOOL_TIMEOUT: "tool",
    FaultKind.DISK_FULL: "store",
    FaultKind.DATABASE_LOCKED: "store",
}


@dataclass(frozen=True, slots=True)
class FaultCall:
    """One call a seam made, as a rule's predicate sees it.

    Attributes:
        target: ``"stage:<name>"``, ``"tool:<name>"``, ``"model"`` or ``"store"``.
        session_id: The session making the call (``None`` outside a session).
        index: Which call of this target in this session it is, from 1.
        detail: What identifies it: ``{"stage"}``, a tool's ``{"arguments"}``,
            the model's ``{"messages"}`` (how many), the store's ``{"operation"}``.
    """

    target: str
    session_id: str | None
    index: int
    detail: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """A fault the plan injected: where, and what.

    Attributes:
        target: The call's target.
        session_id: The session that made the call.
        index: Which call of the target in that session it was, from 1.
        kind: What the fault did.
    """

    target: str
    session_id: str | None
    index: int
    kind: FaultKind


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One rule of a schedule: a fault kind and when it fires.

    Attributes:
        kind: What the fault does.
        rate: The share of calls it fires on (0 to 1), decided per call by hash.
        nth: The call indices (from 1, per session) it fires on.
        when: A predicate over the `FaultCall`.
        message: The injected error's message.
        seconds: A latency's wait, or a 429's ``Retry-After``.
        error: For `FaultKind.ERROR`: builds the exception to raise.
    """

    kind: FaultKind
    rate: float | None = None
    nth: frozenset[int] | None = None
    when: Callable[[FaultCall], bool] | None = None
    message: str = ""
    seconds: float = 0.0
    error: Callable[[], BaseException] | None = None

    def matches(self, call: FaultCall, draw: Callable[[], float]) -> bool:
        """Whether the rule fires on ``call`` (``draw`` gives the call's hashed draw)."""
        if self.nth is not None and call.index not in self.nth:
            return False
        if self.when is not None and not self.when(call):
            return False
        return self.rate is None or draw() < self.rate


async def act(rule: FaultRule, call: FaultCall) -> Callable[[Any], Any] | None:
    """Do what ``rule`` says to ``call``."""
    kind = rule.kind
    where = f"{call.target} (call {call.index} of session {call.session_id})"
    if kind is FaultKind.LATENCY:
        await anyio.sleep(rule.seconds)
        return None
    if kind is FaultKind.HANG:
        await anyio.sleep_forever()
    if kind is FaultKind.TRANSIENT:
        raise Transient(f"{rule.message} at {where}")
    if kind is FaultKind.RATE_LIMITED:
        raise Transient(f"{rule.message} at {where}", retry_after=rule.seconds)
    if kind is FaultKind.RECOVERABLE:
        raise Recoverable(f"{rule.message} at {where}")
    if kind is FaultKind.FATAL:
        raise Fatal(f"{rule.message} at {where}")
    if kind is FaultKind.TOOL_TIMEOUT:
        raise ToolTimeout(tool=call.target.partition(":")[2], timeout=0.0, detail="injected")
    if kind in (FaultKind.DISK_FULL, FaultKind.DATABASE_LOCKED):
        raise StoreError(f"{rule.message} at {where}", location="fault plan")
    if kind is FaultKind.ERROR:
        assert rule.error is not None
        raise rule.error()
    if kind is FaultKind.MALFORMED_REPLY:
        return _malformed
    return _truncated


def _malformed(reply: ModelReply) -> ModelReply:
    """A tool call whose arguments are cut off mid-JSON."""
    name = reply.tool_calls[0].name if reply.tool_calls else "answer"
    call = ToolCall(id="injected-malformed", name=name, arguments='{"arguments": ')
    message = AssistantMessage(content=None, tool_calls=(call,))
    return reply.model_copy(update={"message": message, "finish_reason": "tool_calls"})


def _truncated(reply: ModelReply) -> ModelReply:
    """The reply cut in half: its text, or its tool calls' arguments."""
    message = reply.message
    if message.tool_calls:
        calls = tuple(
            call.model_copy(update={"arguments": call.arguments[: len(call.arguments) // 2]})
            for call in message.tool_calls
        )
        cut = message.model_copy(update={"tool_calls": calls})
    else:
        text = message.content or ""
        cut = message.model_copy(update={"content": text[: len(text) // 2]})
    return reply.model_copy(update={"message": cut, "finish_reason": "length"})
