"""`react_agent`'s option groups, and the flat keywords they replace (deprecated a release)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from arkhon_rheo import ConfigurationError, Gate
from arkhon_rheo.react import (
    Budget,
    Calls,
    Checks,
    Limits,
    Memory,
    PromptCache,
    StuckPolicy,
    Summarize,
    react_agent,
)
from arkhon_rheo.react._config import ReactConfig
from arkhon_rheo.react._groups import grouped
from arkhon_rheo.testing import ScriptedModel

#: Every flat keyword of earlier releases, with a value other than its default.
FLAT: dict[str, Any] = {
    "budget": Budget(max_turns=3),
    "max_steps": 7,
    "max_format_retries": 1,
    "deadlines": None,
    "stuck": "soft",
    "rules": [],
    "gates": [Gate.before("act")],
    "json_mode": True,
    "stream": False,
    "cache": PromptCache(4),
    "prices": {"m": (1.0, 2.0)},
    "max_parallel_tools": 2,
    "tool_failures": "escalate",
    "max_context_tokens": 500,
}

GROUPS: dict[str, Any] = {
    "limits": Limits(budget=FLAT["budget"], max_steps=7, max_format_retries=1),
    "checks": Checks(stuck="soft", rules=[], gates=FLAT["gates"]),
    "calls": Calls(
        json_mode=True,
        cache=FLAT["cache"],
        prices=FLAT["prices"],
        max_parallel_tools=2,
        tool_failures="escalate",
    ),
    "memory": Memory(max_tokens=500),
}


def _settings(config: ReactConfig) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}


def test_each_group_has_the_engines_defaults() -> None:
    assert grouped(dict.fromkeys(GROUPS), {}) == grouped(
        {"limits": Limits(), "checks": Checks(), "calls": Calls(), "memory": Memory()}, {}
    )
    config = ReactConfig(ScriptedModel(), **grouped(dict.fromkeys(GROUPS), {}))
    assert (config.max_steps, config.max_parallel_tools, config.tool_failures) == (
        50,
        8,
        "observe",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().max_steps = 3  # type: ignore[misc]
    positional: Any = (10,)
    with pytest.raises(TypeError):
        Limits(*positional)  # keywords only


def test_the_flat_keywords_still_work_with_a_warning_naming_the_group() -> None:
    with pytest.warns(DeprecationWarning, match=r"give limits=Limits\(max_steps=\.\.\.\)"):
        old = react_agent(ScriptedModel(), **FLAT)
    new = react_agent(ScriptedModel(), **GROUPS)
    assert old.graph() == new.graph()
    with pytest.warns(DeprecationWarning, match="flat keywords are deprecated"):
        flat = ReactConfig(ScriptedModel(), **grouped(dict.fromkeys(GROUPS), FLAT))
    groups = ReactConfig(ScriptedModel(), **grouped(GROUPS, {}))
    assert _settings(flat).keys() == _settings(groups).keys()
    for name, value in _settings(groups).items():
        if name != "model":
            assert getattr(flat, name) == value, name


def test_the_warning_points_at_the_caller() -> None:
    with pytest.warns(DeprecationWarning, match="max_steps") as caught:
        react_agent(ScriptedModel(), max_steps=3)
    assert caught[0].filename == __file__


def test_memory_as_a_summarize_is_the_old_form() -> None:
    summarize = Summarize(max_tokens=100)
    with pytest.warns(DeprecationWarning, match=r"memory=Memory\(summarize=\.\.\.\)"):
        react_agent(ScriptedModel(), memory=summarize)  # type: ignore[arg-type]
    assert grouped({"memory": Memory(summarize=summarize)}, {})["memory"] is summarize
    with pytest.warns(DeprecationWarning, match="max_context_tokens"):
        both = grouped({"memory": summarize}, {"max_context_tokens": 50})
    assert (both["memory"], both["max_context_tokens"]) == (summarize, 50)


def test_a_group_given_with_one_of_its_old_keywords_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"stuck= and checks= both given"):
        react_agent(ScriptedModel(), checks=Checks(rules=[]), stuck=StuckPolicy.SOFT)


def test_a_keyword_never_taken_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_turns'"):
        react_agent(ScriptedModel(), max_turns=3)


def test_a_group_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"limits must be a Limits\(...\) or None"):
        react_agent(ScriptedModel(), limits=Checks())  # type: ignore[arg-type]


def test_the_groups_are_checked_where_the_engine_checks() -> None:
    with pytest.raises(ConfigurationError, match="max_steps must be at least 1"):
        react_agent(ScriptedModel(), limits=Limits(max_steps=0))
    with pytest.raises(ConfigurationError, match="tool_failures"):
        react_agent(ScriptedModel(), calls=Calls(tool_failures="ignore"))  # type: ignore[arg-type]
