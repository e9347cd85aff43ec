"""`ReactConfig`: react_agent's arguments checked once, frozen, and what follows from them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from arkhon_rheo import ConfigurationError
from arkhon_rheo.models import OpenAIChatClient, Pricing
from arkhon_rheo.protocols import (
    AssistantMessage,
    Lifecycle,
    ModelReply,
    NamedModelClient,
    StreamingModelClient,
)
from arkhon_rheo.react import Budget, Limits, ReactState, react_agent
from arkhon_rheo.react._config import DEFAULT_SYSTEM_PROMPT, ReactConfig
from arkhon_rheo.react._stages import ActStage, ThinkStage
from arkhon_rheo.testing import ScriptedModel
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arkhon_rheo.protocols import Message, ToolSpec


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Unnamed:
    """A model client with nothing but `complete`."""

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] = (),
        json_mode: bool = False,
    ) -> ModelReply:
        return ModelReply(message=AssistantMessage(content="hi"))


class SubState(ReactState):
    note: str = ""


def test_the_defaults_are_react_agents_and_the_derived_fields_follow() -> None:
    config = ReactConfig(ScriptedModel(), [add])
    assert config.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert isinstance(config.runner, Toolbox)
    assert [spec.name for spec in config.runner.specs] == ["add"]
    assert config.limits == Budget()
    assert (config.pricing, config.answer_adapter) == (None, None)
    assert (config.ask_json, config.timed, config.stream) == (False, False, False)


def test_what_the_arguments_imply_is_derived_once() -> None:
    toolbox = Toolbox(add)
    config = ReactConfig(
        ScriptedModel(),
        toolbox,
        budget=Budget(max_seconds=5),
        answer_type=int,
        prices={"gpt-4o-mini": (0.15, 0.6)},
    )
    assert config.runner is toolbox
    assert config.timed
    assert config.ask_json
    assert config.answer_adapter is not None
    assert isinstance(config.pricing, Pricing)


def test_it_is_frozen() -> None:
    config = ReactConfig(ScriptedModel())
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_steps = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_steps": 0}, "max_steps must be at least 1, got 0"),
        ({"max_parallel_tools": 0}, "max_parallel_tools must be at least 1, got 0"),
        ({"max_format_retries": -1}, "max_format_retries must be at least 1, got 0"),
        ({"state_type": dict}, "state_type must be ReactState or a subclass"),
        ({"stream": True}, r"stream=True\) needs a model client with stream\(\)"),
    ],
)
def test_bad_arguments_are_refused_with_what_to_fix(options: dict[str, object], match: str) -> None:
    model = Unnamed() if options.get("stream") else ScriptedModel()
    with pytest.raises(ConfigurationError, match=match):
        ReactConfig(model, **options)  # type: ignore[arg-type]


def test_model_call_spans_are_named_by_the_clients_system_and_model() -> None:
    scripted = ScriptedModel(model="m1")
    openai = OpenAIChatClient("gpt-test", api_key="k", base_url="http://localhost:1")
    assert isinstance(scripted, NamedModelClient)
    assert isinstance(openai, NamedModelClient)
    assert not isinstance(Unnamed(), NamedModelClient)
    assert isinstance(scripted, StreamingModelClient)  # naming takes nothing from streaming
    named = ReactConfig(scripted)
    assert (named.trace_system, named.trace_model) == ("ScriptedModel", "m1")
    assert (ReactConfig(openai).trace_system, ReactConfig(openai).trace_model) == (
        "openai",
        "gpt-test",
    )
    unnamed = ReactConfig(Unnamed())
    assert (unnamed.trace_system, unnamed.trace_model) == ("Unnamed", "")


def test_each_machine_binds_its_own_config_to_module_level_stages() -> None:
    first = react_agent(
        ScriptedModel(),
        [add],
        state_type=SubState,
        limits=Limits(max_steps=3),
    )
    second = react_agent(ScriptedModel(), name="other")
    think = first.stages[Lifecycle.THINKING]
    assert issubclass(think, ThinkStage)
    assert think is not second.stages[Lifecycle.THINKING]
    assert [stage.name for stage in first.stages.values()] == ["start", "think", "act"]
    assert think.reads == ThinkStage.reads
    assert think.writes == ThinkStage.writes
    assert think.config.max_steps == 3
    assert first.state_type is SubState
    act = second.stages[Lifecycle.ACTING]
    assert issubclass(act, ActStage)
    assert act.config.name == "other"
