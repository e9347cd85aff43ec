"""Two versions of one machine (``"safe"``) whose state holds secrets (`Sensitive` fields).

Version 1 keeps a sensitive ``secret`` (exchanged at a recorded tool each
cycle: the tool's answer holds the new one, written in the same step), a
sensitive sequence ``pins`` (appended), a plain ``draft`` and a count.
Version 2 renames ``secret`` to ``token`` (still sensitive), removes
``draft``, widens ``user`` and adds ``mood`` (with a default), and declares
the upgrade; `v2_undeclared` makes the same changes without declaring them.

``THINKING -> ACTING -> THINKING ... -> FINISHED`` after ``cycles`` cycles;
``act`` waits for `HOLD`'s event when one is set (a session can be left
"running" mid-stage). Every secret is one of `SECRETS`.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio

from arkhon_rheo import (
    AgentState,
    Gate,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    record_call,
    stage,
)
from arkhon_rheo.protocols import Sensitive, Upgrade

L = Lifecycle
NAME = "safe"

#: The secret a session starts with.
FIRST = "sec-0a1b2c3d4e5f6071"
#: The secret the exchange tool hands back in each cycle.
TOKENS = ("sec-cycle0-9d8c7b6a5f", "sec-cycle1-4e3d2c1b0a", "sec-cycle2-77aa88bb99")
#: The pin each cycle appends to the sensitive sequence.
PINS = ("pin-0-31415926", "pin-1-27182818", "pin-2-14142135")
#: Every secret, as the text it would show up as.
SECRETS = (FIRST, *TOKENS, *PINS)

#: Set by a test: ``act`` waits for it (``None``: ``act`` goes straight on).
HOLD: dict[str, anyio.Event | None] = {"event": None, "inside": None}


class SafeV1(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    user: str = "ann"
    secret: Annotated[str, Sensitive()] = ""
    pins: Annotated[History[str], Sensitive()] = History()
    draft: str = ""
    count: int = 0


class SafeV2(AgentState):
    lifecycle: Lifecycle = L.THINKING
    cycles: int = 2
    user: str | None = "ann"  # widened: compatible
    token: Annotated[str, Sensitive()] = ""  # renamed from `secret`: declared
    pins: Annotated[History[str], Sensitive()] = History()
    count: int = 0
    mood: str = "calm"  # new, with a default: compatible
    # `draft` removed: declared


async def _exchange(cycle: int) -> dict[str, Any]:
    return {"new": TOKENS[cycle], "expires": 3600}


def build(state_type: type[AgentState], **versioning: Any) -> Machine[Any]:
    """The safe machine over ``state_type`` (its secret field, and draft if it has one)."""
    fields = state_type.model_fields
    secret = "token" if "token" in fields else "secret"
    writes = {secret, "pins", "count", *({"draft"} if "draft" in fields else ())}

    @stage(reads={"iteration", "count", secret}, writes=writes, next=L.ACTING, name="think")
    async def think(view: StateView[Any]) -> Patch:
        cycle = view.iteration
        request = {"old": getattr(view, secret), "cycle": cycle}
        answer = await record_call("tool:exchange", request, lambda: _exchange(cycle), returns=dict)
        values: dict[str, Any] = {secret: answer["new"], "count": view.count + 1}
        if "draft" in writes:
            values["draft"] = f"draft {cycle}"
        return Patch(**values).append("pins", PINS[cycle])

    @stage(
        reads={"iteration", "cycles"},
        writes=(),
        next=lambda s: L.FINISHED if s.iteration + 1 >= s.cycles else L.THINKING,
        name="act",
    )
    async def act(view: StateView[Any]) -> Patch:
        event = HOLD["event"]
        if event is not None:
            inside = HOLD["inside"]
            if inside is not None:
                inside.set()
            await event.wait()
        return Patch()

    return Machine(
        name=NAME,
        state_type=state_type,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.ACTING}, L.ACTING: {L.THINKING, L.FINISHED}},
        stages={L.THINKING: think, L.ACTING: act},
        loop_state=L.THINKING,
        gates=[Gate.before("act")],
        **versioning,
    )


#: Version 1, deployed.
v1 = build(SafeV1)
#: Version 2, its upgrade from version 1 declared.
v2 = build(SafeV2, version=2, upgrades={1: Upgrade(rename={"secret": "token"}, remove=["draft"])})
#: Version 2's changes, undeclared.
v2_undeclared = build(SafeV2)


async def store_version_1(system: Any) -> None:
    """Leave a ``paused`` session (at the gate before ``act``) and a ``running`` one.

    ``paused`` has run one cycle's ``think``; ``running`` is left mid-``act``
    (approved at the gate) when the caller leaves the system's block with
    `HOLD` set. Both are version 1's, their secrets sealed.
    """
    await system.run(v1, SafeV1(cycles=1, secret=FIRST), session_id="paused")
    await system.run(v1, SafeV1(cycles=2, secret=FIRST), session_id="running")
    HOLD["event"], HOLD["inside"] = anyio.Event(), anyio.Event()
    await system.stored(v1, "running").approve()
    inside = HOLD["inside"]
    assert inside is not None
    await inside.wait()
