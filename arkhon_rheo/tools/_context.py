"""`ToolContext`: what a tool call may know of where it runs, injected on request.

A tool declares a parameter annotated `ToolContext` to get one; it is left
out of the arguments the model sees and sends. The session and the step come
from the running stage's scope, the resources from the machine's (see
``Machine(resources=...)``), the call's id from the model's tool call, its
idempotency key from those (see ``_effects.idempotency_key``).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from .._hooks import STAGE_SCOPE, current_resources

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ToolContext", "is_context", "tool_context"]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Where a tool call runs: its session, step, call id, idempotency key and resources.

    Declare a parameter of this type and the `Toolbox` passes it; the model
    never sees it (it is not in the tool's schema, and the model cannot send
    it)::

        @tool
        async def fetch(url: str, ctx: ToolContext) -> str:
            \"\"\"The page at a URL.\"\"\"
            http = ctx.resources["http"]  # declared: react_agent(..., resources={"http": ...})
            return (await http.get(url)).text

    A tool with side effects sends ``idempotency_key`` along (an HTTP API's
    ``Idempotency-Key`` header, a payment's or a ticket's request id), so a call
    made again after a crash is recognised by the service it calls::

        @tool(effect="idempotent")
        async def charge(cents: int, ctx: ToolContext) -> str:
            \"\"\"Charge the customer.\"\"\"
            headers = {"Idempotency-Key": ctx.idempotency_key}
            ...

    A sandboxed tool cannot declare one: it runs in another process, which the
    resources cannot reach.

    Attributes:
        session_id: The session whose step calls the tool (``None`` outside a session).
        step: The number of the event the step will be recorded as (its commit,
            or the failure recorded instead); ``None`` outside a session. A step
            retried after a failure calls again with the same number.
        call_id: The model's id of the tool call (``None`` when the tool is run
            without one).
        resources: The resources of the session's machine, by name (read-only;
            empty outside a session).
        idempotency_key: The call's key, the same every time this call is made
            (a retry, a resume after a crash): made from the session, the step
            that asked for the call (a ReAct agent's: the model turn's, which a
            resume does not change) and the call's id. ``None`` outside a session
            or without a call id.
    """

    session_id: str | None
    step: int | None
    call_id: str | None
    resources: Mapping[str, object]
    idempotency_key: str | None = None


def tool_context(call_id: str | None, key: str | None = None) -> ToolContext:
    """The context of a call of id ``call_id`` (and key ``key``) made in this task."""
    scope = STAGE_SCOPE.get()
    if scope is None:
        return ToolContext(None, None, call_id, current_resources(), key)
    return ToolContext(scope.session_id, scope.seq, call_id, current_resources(), key)


def is_context(annotation: Any) -> bool:
    """Whether a parameter's resolved annotation is `ToolContext` (``Annotated`` around it too)."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is ToolContext
