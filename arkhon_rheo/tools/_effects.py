"""What a tool does to the world, and how its calls are made once only.

A tool declares its effect (`Effect`): read-only (the default: nothing is
kept), or side-effecting, with what to do with a call that started and never
finished (a crash, a timeout) since it may or may not have happened:
``idempotent`` (run it again: the tool makes that safe, with the call's
idempotency key), ``ask`` (a human decides, at a gate showing the call's
arguments) or ``fail`` (fail the session). It also has a run policy for every
call (`RunPolicy`): ``allow``, ``approve`` (a human approves each call first)
or ``block``.

Each call has an idempotency key (`idempotency_key`): made from its session,
the step that asked for it and the model's call id, so it is the same every
time the call is made again, across retries, crashes and resumes. A call of a
side-effecting tool runs through the session's effect ledger (`run_once`):
its intent is committed to the store before it runs, its result when it
returns; a call whose result is stored is answered from it, never run again.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import AmbiguousEffect, ArkhonError, ConfigurationError, ToolCallHeld, ToolTimeout
from .._redact import scrub_data, scrub_secrets
from ..protocols import EffectStatus, ToolMessage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..protocols import Store, ToolCall

__all__ = [
    "Effect",
    "Ledger",
    "RunPolicy",
    "effect_of",
    "idempotency_key",
    "policy_of",
    "refused_by",
    "run_once",
]


class Effect(enum.Enum):
    """What a tool does to the world, and what a call that may have happened gets.

    Declared with ``@tool(effect=...)`` (the value or its name as a string).
    """

    #: It changes nothing: a call is run again whenever its step is (the default;
    #: nothing is kept for it).
    READ = "read"
    #: It changes the world, and running a call again is safe (it sends the call's
    #: idempotency key, say): a call that started and never finished runs again.
    IDEMPOTENT = "idempotent"
    #: It changes the world: a call that started and never finished waits for a
    #: human, at a gate showing its arguments (editable) to approve or abort.
    ASK = "ask"
    #: It changes the world: a call that started and never finished fails the
    #: session (`AmbiguousEffect`), never running twice.
    FAIL = "fail"


class RunPolicy(enum.Enum):
    """Whether a tool's calls may run (``@tool(run=...)``, or ``Toolbox(policies=...)``)."""

    #: They run (the default).
    ALLOW = "allow"
    #: Each call waits for a human to approve it (with its arguments, editable) first.
    APPROVE = "approve"
    #: None runs: the tool is not offered to the model, and a call of it is answered
    #: with an error.
    BLOCK = "block"


def effect_of(value: Effect | str, *, tool: str) -> Effect:
    """``value`` as an `Effect`.

    Raises:
        ConfigurationError: It is not one.
    """
    try:
        return value if isinstance(value, Effect) else Effect(value)
    except ValueError:
        names = ", ".join(repr(e.value) for e in Effect)
        raise ConfigurationError(
            f"tool {tool!r}: effect must be one of {names} (or an Effect), got {value!r}"
        ) from None


def policy_of(value: RunPolicy | str, *, tool: str) -> RunPolicy:
    """``value`` as a `RunPolicy`.

    Raises:
        ConfigurationError: It is not one.
    """
    try:
        return value if isinstance(value, RunPolicy) else RunPolicy(value)
    except ValueError:
        names = ", ".join(repr(p.value) for p in RunPolicy)
        raise ConfigurationError(
            f"tool {tool!r}: the run policy must be one of {names} (or a RunPolicy), got {value!r}"
        ) from None


def refused_by(policy: RunPolicy, call: ToolCall, *, approved: bool) -> str | None:
    """Why ``policy`` refuses ``call`` (the model's error message), or ``None`` if it may run.

    Raises:
        ToolCallHeld: The policy is ``approve`` and no human approved the call.
    """
    if policy is RunPolicy.BLOCK:
        return f"tool {call.name!r} is blocked here (its run policy); do without it"
    if policy is RunPolicy.APPROVE and not approved:
        raise ToolCallHeld(
            f"tool {call.name!r}: call {call.id!r} waits for a human's approval", "approval"
        )
    return None


def idempotency_key(session_id: str, step: int, call_id: str) -> str:
    """The idempotency key of call ``call_id`` asked for by step ``step`` of a session.

    The same three always give the same key, and different ones different keys:
    ``"arkr-"`` and 32 hex digits (a hash), fit for an ``Idempotency-Key`` header.
    """
    text = json.dumps([session_id, step, call_id], ensure_ascii=True)
    return "arkr-" + hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Ledger:
    """Where one call's effect is kept: the store, its session, and the call's key."""

    store: Store
    session_id: str
    key: str


async def run_once(
    ledger: Ledger,
    call: ToolCall,
    effect: Effect,
    arguments: Any,
    run: Callable[[], Awaitable[ToolMessage]],
    *,
    rerun: int = 0,
) -> ToolMessage:
    """Run a side-effecting call at most once, through the session's effect ledger.

    The call's intent is committed first; then it runs, and its answer is stored.
    A call the ledger has done already is answered with its stored answer. One
    that started and never finished (ambiguous) runs again if the tool is
    idempotent, or if a human let it (``rerun``: the number of times it had been
    begun when the human was asked, so the permission is spent once it runs
    again: if that run is cut short too, a human is asked again); else it fails
    the session (`Effect.FAIL`) or is held for a human (`Effect.ASK`). A call
    that raised a classified error of its own is stored as failed (its next
    attempt runs); one past its timeout, or cancelled, stays started: ambiguous.

    Raises:
        AmbiguousEffect: Ambiguous, and the tool's effect is `Effect.FAIL`.
        ToolCallHeld: Ambiguous, and the tool's effect is `Effect.ASK`.
    """
    store, sid, key = ledger.store, ledger.session_id, ledger.key
    stored_arguments = scrub_data(arguments)
    entry, began = await store.begin_effect(
        sid, key, tool=call.name, arguments=stored_arguments, retry=effect is Effect.IDEMPOTENT
    )
    if not began and entry.status is EffectStatus.STARTED and rerun == entry.attempts:
        entry, began = await store.begin_effect(
            sid, key, tool=call.name, arguments=stored_arguments, retry=True
        )
    if not began:
        if entry.status is EffectStatus.DONE:
            answer = entry.result if isinstance(entry.result, dict) else {}
            return ToolMessage(
                tool_call_id=call.id,
                name=call.name,
                content=str(answer.get("content", "")),
                is_error=bool(answer.get("is_error", False)),
            )
        if effect is Effect.FAIL:
            raise AmbiguousEffect(tool=call.name, key=key)
        raise ToolCallHeld(
            f"tool {call.name!r}: call {call.id!r} started and never finished, so its side "
            "effect may or may not have happened; a human decides whether it runs again",
            "ambiguous",
            entry.attempts,
        )
    try:
        message = await run()
    except ToolTimeout:
        raise  # it may still have happened: left started
    except ArkhonError as exc:  # classified by the tool itself: it did not happen
        with anyio.CancelScope(shield=True):
            await store.finish_effect(sid, key, error=scrub_secrets(repr(exc)))
        raise
    answer = scrub_data({"content": message.content, "is_error": message.is_error})
    with anyio.CancelScope(shield=True):  # it happened: a cancellation must not lose that
        await store.finish_effect(sid, key, result=answer)
    return message
