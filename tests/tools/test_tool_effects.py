"""What a tool declares of its effects and runs, and the idempotency key of each call.

The ledger's behaviour inside a session (intents, stored answers, ambiguous
calls) is tested with the ReAct engine (``tests/react/test_effects.py``) and
under SIGKILL (``tests/react/test_effects_crash.py``); here: the declarations,
their checks, the key, and a toolbox's policies outside a session.
"""

from __future__ import annotations

import json

import pytest

from arkhon_rheo import AgentSystem, ConfigurationError, Machine, Patch, StateView, stage
from arkhon_rheo.protocols import AgentState, Lifecycle, ToolCall
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.tools import (
    Effect,
    RunPolicy,
    Toolbox,
    ToolCallHeld,
    ToolContext,
    idempotency_key,
    tool,
)

pytestmark = pytest.mark.anyio

L = Lifecycle


@tool
async def look(where: str) -> str:
    """Look somewhere."""
    return f"nothing in {where}"


def test_a_tool_is_read_only_and_allowed_unless_it_says_otherwise() -> None:
    assert (look.effect, look.run_policy) == (Effect.READ, RunPolicy.ALLOW)

    @tool(effect="ask", run=RunPolicy.APPROVE)
    async def send(to: str) -> str:
        """Send."""
        return to

    assert (send.effect, send.run_policy) == (Effect.ASK, RunPolicy.APPROVE)


def test_an_unknown_effect_or_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match="'read', 'idempotent', 'ask', 'fail'"):

        @tool(effect="maybe")
        async def one() -> str:
            """One."""
            return ""

    with pytest.raises(ConfigurationError, match="'allow', 'approve', 'block'"):

        @tool(run="sometimes")
        async def two() -> str:
            """Two."""
            return ""


def test_the_idempotency_key_is_stable_and_tells_calls_apart() -> None:
    key = idempotency_key("s", 3, "call-1")
    assert key == idempotency_key("s", 3, "call-1")
    assert key.startswith("arkr-")
    assert len(key) == 37
    assert key.isascii()
    others = {
        idempotency_key("s", 4, "call-1"),
        idempotency_key("t", 3, "call-1"),
        idempotency_key("s", 3, "call-2"),
        idempotency_key("s3", 3, "call-1"),  # no confusion across the parts
        idempotency_key("s", 33, "-1"),
    }
    assert key not in others
    assert len(others) == 5


def test_a_toolbox_policy_overrides_the_tool_and_a_blocked_tool_is_not_offered() -> None:
    box = Toolbox(look, policies={"look": "block"})
    assert box.policy("look") is RunPolicy.BLOCK
    assert box.specs == ()
    assert not box.may_hold
    assert Toolbox(look, policies={"look": "approve"}).may_hold
    with pytest.raises(ConfigurationError, match="'peek', which is not one of its tools"):
        Toolbox(look, policies={"peek": "block"})
    with pytest.raises(ConfigurationError):
        Toolbox(look, policies={"look": "never"})


async def test_a_blocked_call_is_answered_with_an_error_and_an_approved_one_runs() -> None:
    blocked = Toolbox(look, policies={"look": RunPolicy.BLOCK})
    answer = await blocked.call(ToolCall(id="1", name="look", arguments='{"where": "x"}'))
    assert answer.is_error
    assert "blocked" in answer.content
    guarded = Toolbox(look, policies={"look": "approve"})
    with pytest.raises(ToolCallHeld, match="approval") as held:
        await guarded.call(ToolCall(id="1", name="look", arguments='{"where": "x"}'))
    assert (held.value.reason, held.value.attempts) == ("approval", 0)
    answer = await guarded.call(
        ToolCall(id="1", name="look", arguments='{"where": "x"}'), approved=True
    )
    assert answer.content == "nothing in x"


class Chores(AgentState):
    lifecycle: Lifecycle = L.ACTING
    seen: tuple[str, ...] = ()


SEEN: list[ToolContext] = []


@tool(effect="idempotent")
async def sweep(room: str, ctx: ToolContext) -> str:
    """Sweep a room."""
    SEEN.append(ctx)
    return f"swept {room}"


BOX = Toolbox(sweep)


@stage(name="chores", reads={"seen"}, writes={"seen"}, next=L.FINISHED)
async def chores(view: StateView[Chores]) -> Patch:
    first = await BOX.call(ToolCall(id="a", name="sweep", arguments=json.dumps({"room": "x"})))
    again = await BOX.call(ToolCall(id="a", name="sweep", arguments=json.dumps({"room": "x"})))
    other = await BOX.call(
        ToolCall(id="a", name="sweep", arguments=json.dumps({"room": "x"})), step=99
    )
    return Patch(seen=(first.content, again.content, other.content))


async def test_a_custom_stage_gets_keys_from_its_step_and_the_ledger_answers_a_call_once() -> None:
    SEEN.clear()
    machine = Machine(
        name="chores",
        state_type=Chores,
        initial=L.ACTING,
        transitions={L.ACTING: {L.FINISHED, L.FAILED}},
        stages={L.ACTING: chores},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
    )
    store = MemoryStore()
    async with store, AgentSystem(store=store) as system:
        result = await system.run(machine, Chores(), session_id="c")
        entries = await store.effects("c")
    assert result.ok, result.failure
    assert result.state.seen == ("swept x", "swept x", "swept x")
    # The same call made twice in one step is one effect: run once, then answered.
    assert [ctx.idempotency_key for ctx in SEEN] == [
        idempotency_key("c", 1, "a"),
        idempotency_key("c", 99, "a"),
    ]
    assert [(e.key, e.attempts) for e in entries] == [
        (idempotency_key("c", 1, "a"), 1),
        (idempotency_key("c", 99, "a"), 1),
    ]
