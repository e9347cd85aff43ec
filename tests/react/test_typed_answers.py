"""Typed answers: ``react_agent(answer_type=T)`` keeps the validated answer as data, read as ``T``.

The answer's JSON is validated (a reply that does not fit goes back to the
model with what was wrong), kept in ``ReactState.output`` as JSON data, and
``state.output_as(T)`` gives the object, typed: the same after a restart from
the store, a resume, a replay that re-executes the stages, and for sessions
stored before the field existed (``tests/fixtures/react-v1.db``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import typing
from typing import TYPE_CHECKING, Any, assert_type

import pytest
from pydantic import BaseModel, ConfigDict, TypeAdapter
from typing_extensions import TypedDict

from arkhon_rheo import AgentSystem, ConfigurationError, Gate
from arkhon_rheo.core._fingerprint import fingerprint
from arkhon_rheo.protocols import ResponseSchema, UserMessage
from arkhon_rheo.react import (
    AnswerUnavailable,
    Calls,
    Checks,
    Conversation,
    Limits,
    MalformedModelOutput,
    PromptCache,
    ReactState,
    StopReason,
    react_agent,
)
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.testing import ScriptedModel
from tests.fixtures import react_v1 as V1

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


class City(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    population: int
    country: str = "unknown"


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float


class Pair(TypedDict):
    left: int
    right: str


async def test_a_typed_answer_is_kept_as_data_and_read_typed_after_a_retry() -> None:
    model = ScriptedModel(
        ['{"name": "Paris", "population": "many"}', '{"name": "Paris", "population": "2100000"}']
    )
    agent = react_agent(
        model,
        answer_type=City,
        limits=Limits(max_format_retries=1),
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="the biggest city of France"))
    assert result.ok, result.failure
    state = result.state
    city = state.output_as(City)
    assert city == City(name="Paris", population=2_100_000)
    assert type(city) is City
    # The data is the validated value: coerced, defaults filled in; the text stays as written.
    assert state.output == {"name": "Paris", "population": 2_100_000, "country": "unknown"}
    assert state.answer == '{"name": "Paris", "population": "2100000"}'
    assert (state.turns, state.exit) == (2, StopReason.ANSWERED)
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage)
    assert "population" in feedback.content
    assert "JSON" in feedback.content
    assert all(request.json_mode for request in model.requests)


async def test_an_answer_that_never_fits_ends_as_malformed_output() -> None:
    model = ScriptedModel(['{"name": "Paris"}'] * 40)
    agent = react_agent(
        model,
        answer_type=City,
        limits=Limits(max_format_retries=1),
    )
    async with AgentSystem(path=None, backoff=Backoff(base=0, cap=0)) as system:
        handle = await system.start(agent, ReactState(task="a city"))
        result = await handle.result()
        failures = [e.error for e in await handle.history() if e.error is not None]
    assert not result.ok
    assert failures[0].error_type == MalformedModelOutput.__name__
    assert "population: Field required" in failures[0].message
    assert result.state.output is None


@pytest.mark.parametrize(
    ("answer_type", "text", "expected"),
    [
        (Point, '{"x": 1, "y": 2.5}', Point(1.0, 2.5)),
        (Pair, '{"left": "3", "right": "r"}', {"left": 3, "right": "r"}),
        (list[int], '[1, "2", 3]', [1, 2, 3]),
        (dict[str, tuple[int, ...]], '{"a": [1, 2]}', {"a": (1, 2)}),
        (int, "42", 42),
    ],
)
async def test_any_type_pydantic_validates_is_an_answer_type(
    answer_type: Any, text: str, expected: Any
) -> None:
    agent = react_agent(ScriptedModel([text]), answer_type=answer_type)
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="t"))
    assert result.state.output_as(answer_type) == expected


async def test_the_typed_answer_survives_the_store_a_resume_and_a_replay(tmp_path: Path) -> None:
    script = ['{"name": "Lyon", "population": 520000}']
    db = tmp_path / "a.db"
    gated = react_agent(
        ScriptedModel(script),
        answer_type=City,
        checks=Checks(gates=[Gate.before("think")]),
    )
    async with AgentSystem(path=db) as system:
        paused = await system.run(gated, ReactState(task="a city"), session_id="s")
        assert paused.exit_reason.value == "paused"
    # Another process: the paused session resumes from the store and answers.
    resumed = react_agent(
        ScriptedModel(script),
        answer_type=City,
        checks=Checks(gates=[Gate.before("think")]),
    )
    async with AgentSystem(path=db) as system:
        handle = await system.stored(resumed, "s").approve()
        result = await handle.result()
    assert result.ok, result.failure
    expected = City(name="Lyon", population=520_000)
    assert result.state.output_as(City) == expected
    # And another: the stored state, and a replay that runs the stages again
    # (the model answered from the record), give the same object.
    model = ScriptedModel([])
    again = react_agent(
        model,
        answer_type=City,
        checks=Checks(gates=[Gate.before("think")]),
    )
    async with AgentSystem(path=db) as system:
        stored = system.stored(again, "s")
        state = await stored.state()
        report = await stored.replay(reexecute=True)
    assert state.output_as(City) == expected
    assert state.output == result.state.output
    assert report.ok, report.divergence
    assert report.state is not None
    assert report.state.output_as(City) == expected
    assert model.requests == []


def test_a_state_without_an_answer_has_no_typed_answer() -> None:
    assert ReactState().output is None
    with pytest.raises(AnswerUnavailable, match=r"output_as\(City\): the agent has no answer"):
        ReactState(task="t").output_as(City)
    stopped = ReactState(task="t", exit=StopReason.MAX_STEPS)
    with pytest.raises(AnswerUnavailable, match=r"ended without one \(max_steps\)"):
        stopped.output_as(City)


async def test_a_typed_answer_of_another_type_is_refused_by_name() -> None:
    agent = react_agent(ScriptedModel(['{"x": 1, "y": 2}']), answer_type=Point)
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="t"))
    with pytest.raises(AnswerUnavailable, match=r"the agent's answer is not a City \(name: "):
        result.state.output_as(City)


async def test_a_plain_answer_validates_as_a_type_when_it_fits() -> None:
    # Without answer_type nothing is kept as output: the answer's text is validated.
    async with AgentSystem(path=None) as system:
        plain = await system.run(react_agent(ScriptedModel(["hello"])), ReactState(task="t"))
        jsonish = await system.run(react_agent(ScriptedModel(["[1, 2]"])), ReactState(task="t"))
    assert plain.state.output is None
    assert jsonish.state.output_as(list[int]) == [1, 2]
    with pytest.raises(AnswerUnavailable, match="is not a list"):
        plain.state.output_as(list[int])


def test_an_answer_type_pydantic_cannot_validate_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"answer_type .* is not a type pydantic can"):
        react_agent(ScriptedModel([]), answer_type=object())

    with pytest.raises(ConfigurationError, match=r"output_as\(3\): answer_type 3 is not a type"):
        ReactState(answer="3").output_as(3)

    # pydantic's reason is shown: here, typing.TypedDict before Python 3.12.
    class Old(typing.TypedDict):
        a: int

    if sys.version_info < (3, 12):
        with pytest.raises(ConfigurationError, match=r"typing_extensions\.TypedDict"):
            react_agent(ScriptedModel([]), answer_type=Old)


async def test_a_conversation_keeps_the_latest_typed_answer() -> None:
    model = ScriptedModel(['{"x": 1, "y": 1}', '{"x": 2, "y": 2}'])
    agent = react_agent(model, answer_type=Point, conversational=True)
    async with MemoryStore() as store, AgentSystem(store=store) as system:
        chat = Conversation(system, agent, session_id="c")
        await chat.start("first")
        first = await system.stored(agent, "c").state()
        await chat.say("second")
        second = await system.stored(agent, "c").state()
        await chat.close()
        closed = await system.stored(agent, "c").state()
    assert first.output_as(Point) == Point(1, 1)
    assert second.output_as(Point) == Point(2, 2)
    assert closed.output_as(Point) == Point(2, 2)  # closing keeps the last answer


async def test_sessions_stored_before_typed_answers_load_resume_and_replay(
    tmp_path: Path,
) -> None:
    db = tmp_path / "react-v1.db"
    shutil.copy(V1.DB, db)
    script: list[Any] = [V1.adds(1, 1), '{"total": 2}']
    agent = V1.agent(ScriptedModel(script), answer_type=V1.Total)
    async with AgentSystem(path=db) as system:
        assert system.store is not None
        record = await system.store.load("answered")
        assert "output" not in json.dumps(record.snapshot)  # the old state type's values
        assert fingerprint(agent)["version"] == 1  # a field added with a default: compatible
        for sid in ("answered", "paused"):
            report = await system.stored(agent, sid).replay(reexecute=True)
            assert report.ok, (sid, report.divergence)
        answered = await system.stored(agent, "answered").state()
        assert answered.output is None
        assert answered.output_as(V1.Total) == V1.Total(total=5)  # from the answer's text
        paused = await (await system.stored(agent, "paused").approve()).result()
        assert paused.ok, paused.failure
        assert paused.state.output == {"total": 2}
        assert paused.state.output_as(V1.Total) == V1.Total(total=2)
        report = await system.stored(agent, "paused").replay(reexecute=True)
    assert report.ok, report.divergence


def test_output_as_is_typed_for_the_type_asked() -> None:
    # mypy checks these (tests/ is type-checked under --strict); pytest runs them.
    state = ReactState(output={"name": "Oslo", "population": 1, "left": 1, "right": "r"})
    assert_type(state.output_as(City), City)
    assert_type(state.output_as(Pair), Pair)
    assert_type(ReactState(output=[1, 2]).output_as(list[int]), list[int])
    assert_type(ReactState(output={"x": 0, "y": 1}).output_as(Point), Point)
    assert state.output_as(Pair) == {"left": 1, "right": "r"}


async def test_a_shared_prompt_cache_keeps_the_replies_of_different_answer_types_apart() -> None:
    # The same prompt (a system prompt of one's own: the schema is not in the
    # messages) for two answer types: each is a prompt of its own, never a hit.
    cache = PromptCache(maxsize=8)
    city_model = ScriptedModel(['{"name": "Lyon", "population": 522250}'])
    point_model = ScriptedModel(['{"x": 1.0, "y": 2.0}'])
    city = react_agent(
        city_model, answer_type=City, calls=Calls(cache=cache), system_prompt="Answer."
    )
    point = react_agent(
        point_model, answer_type=Point, calls=Calls(cache=cache), system_prompt="Answer."
    )
    async with AgentSystem(path=None) as system:
        first = await system.run(city, ReactState(task="where?"))
        second = await system.run(point, ReactState(task="where?"))
        again = await system.run(point, ReactState(task="where?"))
    assert first.state.output_as(City) == City(name="Lyon", population=522250)
    assert second.state.output_as(Point) == Point(x=1.0, y=2.0)
    assert again.state.output_as(Point) == Point(x=1.0, y=2.0)  # its own entry: a hit
    assert (len(city_model.requests), len(point_model.requests)) == (1, 1)
    assert (cache.hits, cache.misses) == (1, 2)
    schemas = [
        None,
        ResponseSchema(name="City", json_schema=City.model_json_schema()),
        ResponseSchema(name="Pair", json_schema=TypeAdapter(Pair).json_schema()),
    ]
    keys = {PromptCache.key([UserMessage(content="x")], (), True, schema) for schema in schemas}
    assert len(keys) == 3
