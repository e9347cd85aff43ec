"""Tools in process: specs, validation, error observations, failures, recording, limits."""

from __future__ import annotations

import json
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel, Field

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Fatal,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    StateView,
    Transient,
    stage,
)
from arkhon_rheo.errors import ToolTimeout
from arkhon_rheo.protocols import ToolCall, ToolMessage, ToolRunner
from arkhon_rheo.session._recording import CallPlayback, CallRecorder
from arkhon_rheo.supervision import Backoff
from arkhon_rheo.tools import Tool, Toolbox, ToolError, tool

L = Lifecycle


class Place(BaseModel):
    city: str
    country: str = "FR"


@tool
async def forecast(
    place: Place, days: int = 1, units: Annotated[str, Field(pattern="^(C|F)$")] = "C"
) -> dict[str, Any]:
    """The weather forecast for a place,
    a few days ahead.

    Uses the national services.

    Args:
        place: Where to look.
        days: How many days ahead,
            at most a week.
        units: C or F.
    """
    return {"city": place.city, "country": place.country, "days": days, "units": units}


@tool(name="add_numbers", description="Add two numbers.", thread=False)
def add(a: int, b: int = 2) -> int:
    return a + b


def call(name: str, arguments: Any = None, *, id: str = "c1") -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return ToolCall(id=id, name=name, arguments=text)


# -- specs --------------------------------------------------------------------------


def test_the_spec_carries_types_defaults_descriptions_and_nested_models() -> None:
    spec = forecast.spec
    assert spec.name == "forecast"
    assert spec.description == "The weather forecast for a place, a few days ahead."
    params = spec.parameters
    assert params["type"] == "object"
    assert params["required"] == ["place"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["days"] == {
        "type": "integer",
        "default": 1,
        "description": "How many days ahead, at most a week.",
    }
    assert props["units"]["pattern"] == "^(C|F)$"
    assert props["place"] == {"$ref": "#/$defs/Place", "description": "Where to look."}
    place = params["$defs"]["Place"]
    assert place["required"] == ["city"]
    assert place["properties"]["country"] == {"type": "string", "default": "FR"}
    assert "title" not in params
    assert all("title" not in prop for prop in props.values())


def test_options_name_and_describe_the_tool() -> None:
    assert add.spec.name == "add_numbers"
    assert add.spec.description == "Add two numbers."
    assert add.spec.parameters["required"] == ["a"]


def test_a_parameter_named_like_a_model_attribute_keeps_its_name_for_the_model() -> None:
    @tool
    def lookup(json: str, model_id: int) -> str:
        return f"{json}:{model_id}"

    assert set(lookup.spec.parameters["properties"]) == {"json", "model_id"}
    assert lookup.validate('{"json": "x", "model_id": 3}').model_dump(by_alias=True) == {
        "json": "x",
        "model_id": 3,
    }


@pytest.mark.anyio
async def test_a_tool_is_callable_directly_with_typed_arguments() -> None:
    assert isinstance(forecast, Tool)
    assert (await forecast(Place(city="Oslo"), 2))["days"] == 2
    assert add(1, 5) == 6


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: tool(name="has space")(lambda: 1), "not accepted by model APIs"),
        (lambda: tool(timeout=0)(add.fn), "timeout must be a positive"),
        (lambda: tool(concurrency=0)(add.fn), "concurrency must be an int"),
    ],
)
def test_bad_options_are_configuration_errors(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_unannotated_or_variadic_parameters_are_refused() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    def variadic(*names: str) -> str:
        return ""

    with pytest.raises(ConfigurationError, match="'x' has no annotation"):
        tool(untyped)
    with pytest.raises(ConfigurationError, match=r"takes \*names"):
        tool(variadic)


def test_duplicate_names_name_both_tools() -> None:
    @tool(name="add_numbers")
    def other(a: int) -> int:
        return a

    with pytest.raises(ConfigurationError, match=r"add_numbers.*test_tools:add.*other"):
        Toolbox(add, other)


def test_specs_keep_the_order_the_tools_were_given() -> None:
    box = Toolbox(forecast, add)
    assert isinstance(box, ToolRunner)
    assert [spec.name for spec in box.specs] == ["forecast", "add_numbers"]
    assert [spec.name for spec in Toolbox(add, forecast).specs] == ["add_numbers", "forecast"]
    assert "forecast" in box
    assert box["add_numbers"] is add


# -- answers --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_results_are_text_as_is_or_json() -> None:
    @tool
    async def echo(text: str) -> str:
        return text

    box = Toolbox(forecast, add, echo)
    answer = await box.call(call("forecast", {"place": {"city": "Oslo"}, "days": 3}, id="x9"))
    assert answer == ToolMessage(
        tool_call_id="x9",
        name="forecast",
        content='{"city":"Oslo","country":"FR","days":3,"units":"C"}',
    )
    assert (await box.call(call("add_numbers", {"a": 1}))).content == "3"
    assert (await box.call(call("echo", {"text": "as is"}))).content == "as is"
    assert (await box.call(ToolCall(id="e", name="add_numbers", arguments=""))).is_error


@pytest.mark.anyio
async def test_an_unknown_tool_is_an_error_listing_the_tools() -> None:
    answer = await Toolbox(forecast, add).call(call("search", {"q": "x"}))
    assert answer.is_error
    assert answer.name == "search"
    assert answer.content == "unknown tool 'search'; the tools are: forecast, add_numbers"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{not json", "are not JSON"),
        ('{"a": NaN}', "are not JSON"),
        ("[1, 2]", "(arguments): Input should be an object"),
        ({"b": 1}, "a: Field required"),
        ({"a": "one"}, "a: Input should be a valid integer, unable to parse string"),
        ({"a": 1, "c": 2}, "c: not a parameter of this tool"),
    ],
)
async def test_bad_arguments_are_an_error_the_model_can_act_on(
    arguments: Any, expected: str
) -> None:
    answer = await Toolbox(add).call(call("add_numbers", arguments))
    assert answer.is_error
    assert expected in answer.content
    assert answer.content.startswith(("invalid arguments for 'add_numbers'", "the arguments of"))


@pytest.mark.anyio
async def test_nested_model_errors_point_at_the_field() -> None:
    answer = await Toolbox(forecast).call(call("forecast", {"place": {}, "units": "K"}))
    assert answer.is_error
    assert "place.city: Field required" in answer.content
    assert "units: String should match pattern" in answer.content
    assert "(got 'K')" in answer.content


@pytest.mark.anyio
async def test_a_tools_own_exception_is_an_error_observation() -> None:
    @tool
    async def divide(a: float, b: float) -> float:
        return a / b

    @tool
    def explain(topic: str) -> str:
        raise ToolError(f"no notes on {topic}; try another topic")

    box = Toolbox(divide, explain)
    answer = await box.call(call("divide", {"a": 1, "b": 0}))
    assert answer.is_error
    assert answer.content == "ZeroDivisionError: float division by zero"
    answer = await box.call(call("explain", {"topic": "tides"}))
    assert answer.content == "no notes on tides; try another topic"
    assert box.statistics().errors == 2


@pytest.mark.anyio
@pytest.mark.parametrize("failure", [Transient("rate limited"), Recoverable("x"), Fatal("y")])
async def test_classified_failures_propagate(failure: Exception) -> None:
    @tool
    def flaky() -> str:
        raise failure

    box = Toolbox(flaky)
    with pytest.raises(type(failure)):
        await box.call(call("flaky"))
    assert box.statistics().raised == 1


@pytest.mark.anyio
async def test_a_tool_past_its_timeout_raises_a_transient_tool_timeout() -> None:
    @tool(timeout=0.01)
    async def hang() -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with pytest.raises(ToolTimeout, match=r"tool 'hang' did not finish within 0.01 s") as info:
        await Toolbox(hang).call(call("hang"))
    assert isinstance(info.value, Transient)
    assert (info.value.tool, info.value.timeout) == ("hang", 0.01)


@pytest.mark.anyio
async def test_a_call_without_limits_is_counted_in_flight_and_cancelled_from_outside() -> None:
    entered, release = anyio.Event(), anyio.Event()

    @tool
    async def wait() -> str:
        entered.set()
        await release.wait()
        return "done"

    box = Toolbox(wait)  # no timeout, no concurrency: no scope of its own around the call
    async with anyio.create_task_group() as group:
        group.start_soon(box.call, call("wait"))
        await entered.wait()
        assert (box.statistics().in_flight, box.statistics().waiting) == (1, 0)
        group.cancel_scope.cancel()
    assert (box.statistics().in_flight, box.statistics().raised) == (0, 1)
    release.set()
    assert (await box.call(call("wait"))).content == "done"
    assert (box.statistics().in_flight, box.statistics().calls) == (0, 1)


@pytest.mark.anyio
async def test_a_sync_tool_runs_in_a_worker_thread() -> None:
    import threading

    main = threading.get_ident()

    @tool
    def where() -> bool:
        return threading.get_ident() != main

    assert (await Toolbox(where).call(call("where"))).content == "true"


# -- recording -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_calls_are_recorded_and_a_replay_does_not_run_the_tool() -> None:
    runs: list[int] = []

    @tool
    async def count(n: int) -> int:
        runs.append(n)
        return n * 10

    box = Toolbox(count)
    with CallRecorder() as recorder:
        first = await box.call(call("count", {"n": 4}, id="a"))
        bad = await box.call(call("count", "{oops", id="b"))
    records = recorder.finished()
    assert [record["kind"] for record in records] == ["tool:count", "tool:count"]
    assert records[0]["request"] == {"name": "count", "arguments": {"n": 4}}
    assert records[0]["response"] == first.model_dump(mode="json")
    assert records[1]["request"] == {"name": "count", "arguments": "{oops"}
    assert runs == [4]

    with CallPlayback(records, "s"):
        again = await box.call(call("count", {"n": 4}, id="a2"))
        bad_again = await box.call(call("count", "{oops", id="b"))
    assert runs == [4]  # answered from the record
    assert again == first.model_copy(update={"tool_call_id": "a2"})
    assert bad_again == bad


@pytest.mark.anyio
async def test_a_recorded_transient_failure_is_raised_again_in_replay() -> None:
    runs: list[str] = []

    @tool
    async def flaky() -> str:
        runs.append("run")
        raise Transient("upstream busy")

    box = Toolbox(flaky)
    with CallRecorder() as recorder, pytest.raises(Transient):
        await box.call(call("flaky"))
    with CallPlayback(recorder.finished(), "s"), pytest.raises(Transient, match="upstream busy"):
        await box.call(call("flaky"))
    assert runs == ["run"]


# -- concurrency limits ----------------------------------------------------------------


class Gate:
    """Counts calls in flight and holds them until released."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.release = anyio.Event()

    async def hold(self, name: str) -> str:
        self.in_flight[name] = self.in_flight.get(name, 0) + 1
        total = sum(self.in_flight.values())
        self.peak[name] = max(self.peak.get(name, 0), self.in_flight[name])
        self.peak["*"] = max(self.peak.get("*", 0), total)
        try:
            await self.release.wait()
        finally:
            self.in_flight[name] -= 1
        return name


@pytest.mark.anyio
async def test_a_tools_concurrency_bounds_calls_from_every_session() -> None:
    gate = Gate()

    @tool(concurrency=2)
    async def slow(n: int) -> str:
        return await gate.hold("slow")

    box = Toolbox(slow)
    answers: list[ToolMessage] = []

    async def session(n: int) -> None:  # each task stands for one session
        answers.append(await box.call(call("slow", {"n": n}, id=str(n))))

    async with anyio.create_task_group() as group:
        for n in range(6):
            group.start_soon(session, n)
        await anyio.wait_all_tasks_blocked()
        assert gate.in_flight["slow"] == 2
        stats = box.statistics()
        assert (stats.in_flight, stats.waiting) == (2, 4)
        gate.release.set()
    assert gate.peak["slow"] == 2
    assert len(answers) == 6
    assert not any(answer.is_error for answer in answers)
    assert box.statistics().calls == 6


@pytest.mark.anyio
async def test_the_toolbox_limit_bounds_all_tools_and_a_busy_tool_holds_no_slots() -> None:
    gate = Gate()

    @tool(concurrency=1)
    async def one(n: int) -> str:
        return await gate.hold("one")

    @tool
    async def other(n: int) -> str:
        return await gate.hold("other")

    box = Toolbox(one, other, concurrency=3)
    async with anyio.create_task_group() as group:
        for n in range(4):  # one runs, three queue for the tool, not the toolbox
            group.start_soon(box.call, call("one", {"n": n}))
        await anyio.wait_all_tasks_blocked()
        for n in range(4):  # two of these take the toolbox's free slots
            group.start_soon(box.call, call("other", {"n": n}))
        await anyio.wait_all_tasks_blocked()
        assert gate.in_flight == {"one": 1, "other": 2}
        gate.release.set()
    assert gate.peak == {"one": 1, "other": 2, "*": 3}


# -- supervised ---------------------------------------------------------------------------


class Desk(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    answer: str = ""


@pytest.mark.anyio
async def test_a_transient_tool_failure_is_retried_by_the_supervisor() -> None:
    attempts: list[int] = []

    @tool
    async def lookup(key: str) -> str:
        attempts.append(len(attempts) + 1)
        await anyio.lowlevel.checkpoint()
        if len(attempts) <= 2:
            raise Transient(f"lookup service busy (attempt {len(attempts)})")
        return f"value of {key}"

    box = Toolbox(lookup)

    @stage(reads=set(), writes={"answer"}, next=L.FINISHED, name="ask")
    async def ask(view: StateView[Desk]) -> Patch:
        message = await box.call(call("lookup", {"key": "k"}))
        return Patch(answer=message.content)

    machine = Machine(
        name="desk",
        state_type=Desk,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: ask},
    )
    backoff = Backoff(base=0.001, cap=0.005, max_attempts=3)
    async with AgentSystem(seed=5, backoff=backoff) as agents:
        result = await agents.run(machine, Desk(), session_id="desk-1")
        assert result.exit_reason is ExitReason.FINISHED, result.failure
        report = await agents.stored(machine, "desk-1").replay(reexecute=True)
    assert result.state.answer == "value of k"
    assert result.retries == 2
    assert attempts == [1, 2, 3]
    assert report.ok, report.divergence
    assert attempts == [1, 2, 3]  # the replay answered from the record
