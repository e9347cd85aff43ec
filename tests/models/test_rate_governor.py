"""The rate governor: rpm and tpm limits, shared pauses after a 429, priority, keys, replay.

Every test tells the governor's time by a `VirtualClock` and waits on
``anyio.wait_all_tasks_blocked``: nothing depends on the wall clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from arkhon_rheo import AgentSystem, ConfigurationError, Transient
from arkhon_rheo.models import (
    GovernedClient,
    OpenAIChatClient,
    RateGovernor,
    RateLimit,
    current_priority,
    default_governor,
    governed,
    governing,
    rate_priority,
    set_default_governor,
)
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ReplyDelta, Usage, UserMessage
from arkhon_rheo.react import Budget, Calls, Limits, ReactState, react_agent
from arkhon_rheo.react._budget import Used
from arkhon_rheo.testing import ScriptedModel, VirtualClock
from tests.support.chat_server import Canned, open_chat_server, text_chunks

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio

HI = [UserMessage(content="hi")]


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start=1_000.0)


@pytest.fixture
def default_off() -> Iterator[None]:
    """Leave the process's default governor as the test found it."""
    previous = default_governor()
    yield
    set_default_governor(previous)


async def _take(
    governor: RateGovernor, key: str, log: list[str], name: str, tokens: int = 0
) -> None:
    async with governor.slot(key, tokens=tokens):
        log.append(name)


async def test_many_callers_send_no_more_than_the_requests_per_minute(
    clock: VirtualClock,
) -> None:
    governor = RateGovernor({"m": RateLimit(requests_per_minute=5)}, clock=clock)
    sent: list[str] = []
    async with anyio.create_task_group() as group:
        for n in range(23):
            group.start_soon(_take, governor, "m", sent, f"c{n}")
        for minute in range(1, 6):
            await wait_all_tasks_blocked()
            assert len(sent) == min(5 * minute, 23)  # one minute's worth, no more
            assert governor.statistics("m").waiting == max(0, 23 - 5 * minute)
            clock.advance(59.9)
            await wait_all_tasks_blocked()
            assert len(sent) == min(5 * minute, 23)  # the window has not passed yet
            clock.advance(0.1)
    assert sorted(sent) == sorted(f"c{n}" for n in range(23))
    assert governor.statistics("m").requests == 23


async def test_a_request_counts_until_a_window_after_its_reply(clock: VirtualClock) -> None:
    governor = RateGovernor({"m": RateLimit(requests_per_minute=1)}, clock=clock)
    reply = anyio.Event()
    sent: list[str] = []

    async def slow() -> None:
        async with governor.slot("m"):
            sent.append("slow")
            await reply.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        await wait_all_tasks_blocked()
        group.start_soon(_take, governor, "m", sent, "next")
        clock.advance(120)  # long past a window after it was sent, but it is still out
        await wait_all_tasks_blocked()
        assert sent == ["slow"]
        reply.set()  # answered now: it counts for a window from now
        await wait_all_tasks_blocked()
        assert sent == ["slow"]
        clock.advance(60)
    assert sent == ["slow", "next"]


async def test_tokens_per_minute_are_estimated_then_corrected_by_the_usage(
    clock: VirtualClock,
) -> None:
    governor = RateGovernor({"m": RateLimit(tokens_per_minute=100)}, clock=clock)
    sent: list[str] = []
    first_out, first_back = anyio.Event(), anyio.Event()

    async def first() -> None:
        async with governor.slot("m", tokens=60) as permit:
            sent.append("first")
            first_out.set()
            await first_back.wait()
            permit.used(10)  # it used far less than the estimate

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await first_out.wait()
        group.start_soon(_take, governor, "m", sent, "second", 30)
        await wait_all_tasks_blocked()
        group.start_soon(_take, governor, "m", sent, "third", 50)
        await wait_all_tasks_blocked()
        assert sent == ["first", "second"]  # 60 + 30 fit, 50 more would not
        assert governor.statistics("m").tokens_in_window == 90
        first_back.set()  # corrected to 10: 10 + 30 + 50 fit now, with no time passing
    assert sent == ["first", "second", "third"]
    assert governor.statistics("m").tokens_in_window == 90


async def test_a_request_larger_than_the_window_goes_alone(clock: VirtualClock) -> None:
    governor = RateGovernor({"m": RateLimit(tokens_per_minute=100)}, clock=clock)
    sent: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_take, governor, "m", sent, "small", 10)
        await wait_all_tasks_blocked()
        group.start_soon(_take, governor, "m", sent, "huge", 500)
        await wait_all_tasks_blocked()
        assert sent == ["small"]
        clock.advance(60)
    assert sent == ["small", "huge"]


async def test_a_429_pauses_every_session_on_the_key_together(clock: VirtualClock) -> None:
    governor = RateGovernor(clock=clock)
    async with open_chat_server() as server:
        server.add(Canned.error(429, "slow down", **{"Retry-After": "30"}))
        server.add(*(Canned.completion(f"a{n}") for n in range(6)))
        async with OpenAIChatClient("m", api_key="k", base_url=server.url) as raw:
            client = governed(raw, governor)
            with pytest.raises(Transient) as caught:
                await client.complete(HI)
            assert caught.value.retry_after == 30
            assert governor.statistics(client.key).closed_until == 1_030.0
            answers: list[str] = []

            async def ask() -> None:
                answers.append((await client.complete(HI)).text or "")

            async with anyio.create_task_group() as group:
                for _ in range(6):
                    group.start_soon(ask)
                await wait_all_tasks_blocked()
                assert len(server.requests) == 1  # nobody retried on their own
                assert governor.statistics(client.key).waiting == 6
                clock.advance(29)
                await wait_all_tasks_blocked()
                assert len(server.requests) == 1
                clock.advance(1)  # the pause is over, for all of them at once
    assert sorted(answers) == [f"a{n}" for n in range(6)]
    assert len(server.requests) == 7
    assert governor.statistics(client.key).pauses == 1


async def test_waiting_calls_are_served_by_priority_then_in_the_order_they_asked(
    clock: VirtualClock,
) -> None:
    governor = RateGovernor({"m": RateLimit(requests_per_minute=1)}, clock=clock)
    served: list[str] = []

    async def call(name: str, priority: float) -> None:
        with rate_priority(priority):
            assert current_priority() == priority
            await _take(governor, "m", served, name)

    async with anyio.create_task_group() as group:
        group.start_soon(call, "first", 0.0)
        await wait_all_tasks_blocked()
        for name, priority in [("low", 0.2), ("high-a", 0.9), ("mid", 0.5), ("high-b", 0.9)]:
            group.start_soon(call, name, priority)
            await wait_all_tasks_blocked()  # each asks in turn
        for _ in range(4):
            clock.advance(60)
            await wait_all_tasks_blocked()
    assert served == ["first", "high-a", "high-b", "mid", "low"]


async def test_a_cancelled_waiter_leaves_the_queue(clock: VirtualClock) -> None:
    governor = RateGovernor({"m": RateLimit(requests_per_minute=1)}, clock=clock)
    served: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_take, governor, "m", served, "first")
        await wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            with pytest.raises(anyio.get_cancelled_exc_class()):
                await _take(governor, "m", served, "gave-up")
        group.start_soon(_take, governor, "m", served, "head")
        await wait_all_tasks_blocked()
        inner = anyio.CancelScope()

        async def impatient() -> None:
            with inner:
                await _take(governor, "m", served, "impatient")

        group.start_soon(impatient)
        group.start_soon(_take, governor, "m", served, "last")
        await wait_all_tasks_blocked()
        assert governor.statistics("m").waiting == 3
        inner.cancel()
        await wait_all_tasks_blocked()
        assert governor.statistics("m").waiting == 2
        clock.advance(60)
        await wait_all_tasks_blocked()
        clock.advance(60)
    assert served == ["first", "head", "last"]


async def test_keys_are_independent(clock: VirtualClock) -> None:
    governor = RateGovernor(
        {"a": RateLimit(requests_per_minute=1), "b": RateLimit(requests_per_minute=2)},
        clock=clock,
    )
    governor.pause("c", 100)
    sent: list[str] = []
    async with anyio.create_task_group() as group:
        for key in ("a", "a", "b", "b", "b", "c", "d"):
            group.start_soon(_take, governor, key, sent, key)
        await wait_all_tasks_blocked()
        assert sorted(sent) == ["a", "b", "b", "d"]
        clock.advance(100)
    assert sorted(sent) == ["a", "a", "b", "b", "b", "c", "d"]


async def test_a_pause_while_waiting_for_the_window_pushes_the_head_back(
    clock: VirtualClock,
) -> None:
    governor = RateGovernor({"m": RateLimit(requests_per_minute=1)}, clock=clock)
    sent: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(_take, governor, "m", sent, "first")
        await wait_all_tasks_blocked()
        group.start_soon(_take, governor, "m", sent, "second")
        await wait_all_tasks_blocked()
        governor.pause("m", 90)
        clock.advance(60)  # the window is free, but the lane is closed
        await wait_all_tasks_blocked()
        assert sent == ["first"]
        governor.set_limit("m", None)  # lifting the limit does not lift the pause
        await wait_all_tasks_blocked()
        assert sent == ["first"]
        clock.advance(30)
    assert sent == ["first", "second"]


async def test_a_governed_stream_counts_the_usage_of_its_reply(clock: VirtualClock) -> None:
    governor = RateGovernor({"m": RateLimit(tokens_per_minute=1000)}, clock=clock)
    async with open_chat_server() as server:
        chunks = text_chunks("Hel", "lo")
        chunks.append(
            {"model": "m", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
        )
        server.add(Canned(events=chunks))
        async with OpenAIChatClient("m", api_key="k", base_url=server.url) as raw:
            client = governed(raw, governor, key="m", max_reply_tokens=500)
            assert client.estimate(HI, ()) > 500
            pieces = [chunk async for chunk in client.stream(HI)]  # type: ignore[attr-defined]
    assert [p.text for p in pieces if isinstance(p, ReplyDelta)] == ["Hel", "lo"]
    assert isinstance(pieces[-1], ModelReply)
    assert governor.statistics("m").tokens_in_window == 9


async def test_many_agent_sessions_go_through_the_default_governor(
    clock: VirtualClock, default_off: None
) -> None:
    set_default_governor(RateGovernor(clock=clock))
    governor = default_governor()
    assert governor is not None
    async with open_chat_server() as server:
        server.add(*(Canned.completion(f"a{n}") for n in range(12)))
        client = OpenAIChatClient("m", api_key="k", base_url=server.url)
        governor.set_limit(client, RateLimit(requests_per_minute=5))
        agent = react_agent(client)  # not wrapped: it has a base_url
        async with AgentSystem(path=None) as system:
            handles = [await system.start(agent, ReactState(task=f"t{n}")) for n in range(12)]
            for sent in (5, 10, 12):
                await wait_all_tasks_blocked()
                assert len(server.requests) == sent  # a minute's worth at a time
                assert governor.statistics(governor.key_of(client)).waiting == 12 - sent
                clock.advance(60)
            results = [await handle.result() for handle in handles]
    assert all(result.ok for result in results)
    assert len(server.requests) == 12


async def test_a_replay_makes_no_call_and_does_not_wait(
    clock: VirtualClock, tmp_path: Path
) -> None:
    governor = RateGovernor(clock=clock)
    async with open_chat_server() as server:
        server.add(Canned.completion("42"))
        client = governed(
            OpenAIChatClient("m", api_key="k", base_url=server.url), governor, key="m"
        )
        agent = react_agent(client)
        async with AgentSystem(path=tmp_path / "a.db") as system:
            result = await system.run(agent, ReactState(task="6*7"), session_id="s")
            assert result.state.answer == "42"
            governor.pause("m", 3600)  # any call now would wait an hour of the virtual clock
            report = await system.stored(agent, "s").replay(reexecute=True)
    assert report.ok, report.divergence
    assert len(server.requests) == 1


class _Recorder:
    """A client with a base URL (governed by default) that notes its calls' priority."""

    system = "recorder"
    model = "r"
    base_url = "http://nowhere.invalid/v1"

    def __init__(self) -> None:
        self.priorities: list[float] = []

    async def complete(
        self, messages: object, *, tools: object = (), json_mode: bool = False
    ) -> ModelReply:
        self.priorities.append(current_priority())
        await anyio.lowlevel.checkpoint()
        text = "done" if len(self.priorities) >= 3 else ""
        return ModelReply(
            message=AssistantMessage(content=text or None), usage=Usage(prompt_tokens=1)
        )


async def test_the_engine_asks_with_the_fraction_of_its_budget_left() -> None:
    model = _Recorder()
    agent = react_agent(
        model,
        limits=Limits(budget=Budget(max_turns=4), max_format_retries=3),
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(agent, ReactState(task="x"))
    assert result.ok, result.failure
    assert model.priorities == [1.0, 0.75, 0.5]


def test_the_budget_left_is_the_least_fraction_over_its_limits() -> None:
    assert Budget().left(Used(turns=9)) == 1.0
    assert Budget(max_turns=4, max_cost=2.0).left(Used(turns=1, cost=1.5)) == 0.25
    assert Budget(max_tool_calls=2).left(Used(tool_calls=5)) == 0.0
    assert Budget(max_turns=0).left(Used()) == 0.0


def test_governing_wraps_only_clients_that_name_a_base_url(default_off: None) -> None:
    scripted = ScriptedModel(["hi"])
    assert governing(scripted) is scripted
    client = OpenAIChatClient("m", api_key="k", base_url="http://127.0.0.1:9/v1")
    wrapped = governing(client)
    assert isinstance(wrapped, GovernedClient)
    assert wrapped.key == "openai|http://127.0.0.1:9/v1|m"
    assert governing(wrapped) is wrapped
    assert (wrapped.system, wrapped.model, wrapped.base_url) == ("openai", "m", client.base_url)
    set_default_governor(None)
    assert governing(client) is client
    with pytest.raises(ConfigurationError, match="turned off"):
        governed(client)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute=0"),
        ({"tokens_per_minute": -5}, "tokens_per_minute=-5"),
        ({"requests_per_minute": float("nan")}, "positive number"),
        ({"requests_per_minute": True}, "positive number"),
        ({"window": 0}, "seconds"),
        ({"requests_per_minute": 1, "window": 10}, "lengthen the window"),
    ],
)
def test_a_bad_rate_limit_says_what_to_give(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RateLimit(**kwargs)


def test_bad_governor_arguments_are_refused() -> None:
    governor = RateGovernor()
    with pytest.raises(ConfigurationError, match="takes a RateLimit"):
        governor.set_limit("m", 60)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty"):
        governor.set_limit("", RateLimit(requests_per_minute=1))
    with pytest.raises(ConfigurationError, match="finite number of seconds"):
        governor.pause("m", float("inf"))
    with pytest.raises(ConfigurationError, match="zero or more"):
        governor.pause("m", -1)
    with pytest.raises(ConfigurationError, match="finite"):
        rate_priority(float("inf"))
    with pytest.raises(ConfigurationError, match="a number"):
        rate_priority("high")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="model client"):
        governed(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string"):
        governed(ScriptedModel([]), governor, key="")
    with pytest.raises(ConfigurationError, match="RateGovernor or None"):
        set_default_governor("fast")  # type: ignore[arg-type]
    assert RateLimit(requests_per_minute=600, window=10).requests == 100
    assert RateLimit(tokens_per_minute=60_000, window=1).tokens == 1000
    assert governor.limit_of("unknown") is None


async def test_a_streaming_agent_is_governed_and_counts_its_usage(
    clock: VirtualClock, default_off: None
) -> None:
    set_default_governor(RateGovernor(clock=clock))
    governor = default_governor()
    assert governor is not None
    async with open_chat_server() as server:
        chunks = text_chunks("4", "2")
        usage = {"prompt_tokens": 11, "completion_tokens": 2}
        chunks.append({"model": "m", "choices": [], "usage": usage})
        server.add(Canned(events=chunks))
        client = OpenAIChatClient("m", api_key="k", base_url=server.url)
        key = governor.set_limit(client, RateLimit(tokens_per_minute=10_000))
        async with AgentSystem(path=None) as system:
            result = await system.run(
                react_agent(
                    client,
                    calls=Calls(stream=True),
                ),
                ReactState(task="6*7"),
            )
    assert result.state.answer == "42"
    assert governor.statistics(key).tokens_in_window == 13
    assert governor.statistics(key).requests == 1
