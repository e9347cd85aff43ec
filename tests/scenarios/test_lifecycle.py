"""Seed 004 on examples/lifecycle_agent.py: the path-dependent invariant (§5.3 Module B)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from arkhon_rheo import AgentSystem, Lifecycle
from arkhon_rheo.errors import TransitionInvariantViolation
from arkhon_rheo.session._commit_rule import PatchValidator
from arkhon_rheo.testing import ScriptedModel

pytestmark = pytest.mark.anyio
L = Lifecycle

_PATH = Path(__file__).resolve().parents[2] / "examples" / "lifecycle_agent.py"
_spec = importlib.util.spec_from_file_location("lifecycle_agent", _PATH)
assert _spec is not None
assert _spec.loader is not None
ex: Any = importlib.util.module_from_spec(_spec)
sys.modules["lifecycle_agent"] = ex
_spec.loader.exec_module(ex)


def test_observing_reached_from_acting_needs_the_action() -> None:
    validator = PatchValidator(ex.build_machine(ScriptedModel()))
    thought = ex.Thought(intent="compute", tools=("calculator",), reasoning="1+1")
    acting = ex.ReActState(lifecycle=L.ACTING, user_input="?", thought=thought)
    with pytest.raises(TransitionInvariantViolation, match="needs the Action"):
        validator.check_transition(
            acting, acting.model_copy(update={"lifecycle": L.OBSERVING}), stage="act"
        )
    action = ex.Action(requested_tools=("calculator",), tool_outputs=("2",))
    after = acting.model_copy(update={"lifecycle": L.OBSERVING, "action": action})
    validator.check_transition(acting, after, stage="act")
    # Observing reached from Thinking (no tool needed) has no such requirement.
    thinking = acting.model_copy(update={"lifecycle": L.THINKING})
    validator.check_transition(
        thinking, thinking.model_copy(update={"lifecycle": L.OBSERVING}), stage="think"
    )


async def test_the_machine_runs_on_the_model_client_and_the_toolbox() -> None:
    model = ScriptedModel(ex.SCRIPT)
    async with AgentSystem(path=None) as system:
        handle = await system.start(ex.build_machine(model), ex.ReActState(user_input="6*7?"))
        result = await handle.result()
    assert result.state.observation.final_answer == "42"
    assert [e.to_state for e in (await handle.history())] == [
        L.THINKING,
        L.OBSERVING,
        L.THINKING,
        L.ACTING,
        L.OBSERVING,
        L.FINISHED,
    ]
    act = (await handle.history())[4]
    call = (act.info or {})["io"][0]
    assert call["kind"] == "tool:calculator"
    assert call["request"] == {"name": "calculator", "arguments": {"expression": "6*7+0"}}
    assert len(model.requests) == 2
    assert json.loads(ex.SCRIPT[1])["tools"] == ["calculator"]
