"""Resources the agent system opens: once each, before anything is stored, left after the sessions.

A machine declares named resources (``Machine(resources=...)``; `react_agent`
declares its model client). The system enters each async context manager
among them once, whichever machine or session needs it first, in a task of its
own, and leaves it when it stops, after its sessions; one that reports itself
open is left alone; one that cannot open raises `ResourceUnavailable` from
`start`, `resume`, `approve` and `recover` with nothing stored or recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    Gate,
    Machine,
    MemoryStore,
    Patch,
    SQLiteStore,
    StateView,
    stage,
    subgraph,
)
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.errors import ResourceUnavailable
from arkhon_rheo.models import OpenAIChatClient
from arkhon_rheo.react import ReactState, react_agent
from arkhon_rheo.session._journal import Journal
from tests.support.chat_server import Canned, open_chat_server

if TYPE_CHECKING:
    from pathlib import Path

    from arkhon_rheo.protocols import Store

pytestmark = pytest.mark.anyio


class Probe:
    """An async context manager that notes when it is entered and left.

    With ``fail`` its entering raises that; with ``task_bound`` it holds a task
    group while open, which anyio lets only the entering task leave.
    """

    def __init__(
        self, log: list[str], name: str, *, fail: Exception | None = None, task_bound: bool = False
    ) -> None:
        self.log, self.name, self.fail, self.task_bound = log, name, fail, task_bound
        self._group: Any = None

    async def __aenter__(self) -> Probe:
        if self.fail is not None:
            raise self.fail
        if self.task_bound:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
            self._group.start_soon(anyio.sleep_forever)
        self.log.append(f"enter {self.name}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._group is not None:
            self._group.cancel_scope.cancel()
            await self._group.__aexit__(None, None, None)
        self.log.append(f"exit {self.name}")


class Opened:
    """A resource its user entered already: it says so, and must not be entered again."""

    is_open = True

    async def __aenter__(self) -> Opened:
        raise AssertionError("entered again")

    async def __aexit__(self, *exc: object) -> None:
        raise AssertionError("left by the system")


class Job(AgentState):
    lifecycle: L = L.INITIALIZED
    done: bool = False


def job_machine(
    resources: dict[str, object],
    *,
    name: str = "job",
    gated: bool = False,
    block: list[str] | None = None,
) -> Machine[Job]:
    """One stage, then finished; it waits until cancelled (noting it in ``block``) if given."""

    @stage(writes={"done"}, next=L.FINISHED, name="work")
    async def work(view: StateView[Job]) -> Patch:
        if block is not None:
            try:
                await anyio.sleep_forever()
            finally:
                block.append("stage stopped")
        return Patch(done=True)

    return Machine(
        name=name,
        state_type=Job,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: work},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        gates=[Gate.before("work")] if gated else (),
        resources=resources,
    )


def test_a_machines_resources_are_named_by_non_empty_strings() -> None:
    for bad in ({"": object()}, {1: object()}):
        with pytest.raises(ConfigurationError, match="resource's name must be a non-empty string"):
            job_machine(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="resources must be a mapping"):
        job_machine(["model"])  # type: ignore[arg-type]
    machine = job_machine({"db": 1})
    assert dict(machine.resources) == {"db": 1}
    with pytest.raises(TypeError):
        machine.resources["db"] = 2  # type: ignore[index]
    assert dict(job_machine({}).resources) == {}


async def test_each_resource_is_opened_once_for_every_machine_and_session_sharing_it() -> None:
    log: list[str] = []
    shared, own = Probe(log, "shared"), Probe(log, "own")
    first = job_machine({"pool": shared, "plain": object()}, name="first")
    second = job_machine({"pool": shared, "own": own}, name="second")
    async with AgentSystem(path=None) as system:
        assert log == []  # nothing is opened before a session needs it
        async with anyio.create_task_group() as group:
            for machine in (first, second, first, second, first):
                group.start_soon(system.run, machine, Job())
        assert sorted(log) == ["enter own", "enter shared"]
        assert (await system.run(first, Job())).ok
        assert len(log) == 2
    assert sorted(log[2:]) == ["exit own", "exit shared"]


async def test_resources_are_left_after_the_sessions_stopped() -> None:
    log: list[str] = []
    machine = job_machine({"probe": Probe(log, "probe")}, block=log)
    async with AgentSystem(path=None) as system:
        await system.start(machine, Job())
        await wait_all_tasks_blocked()
        assert log == ["enter probe"]
    assert log == ["enter probe", "stage stopped", "exit probe"]


async def test_an_error_or_a_cancellation_of_the_block_closes_them_too() -> None:
    log: list[str] = []
    machine = job_machine({"probe": Probe(log, "probe")}, block=log)

    async def fail_in_the_block() -> None:
        async with AgentSystem(path=None) as system:
            await system.start(machine, Job())
            await wait_all_tasks_blocked()
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):  # as raised, in no group
        await fail_in_the_block()
    assert log == ["enter probe", "stage stopped", "exit probe"]
    log.clear()
    machine = job_machine({"probe": Probe(log, "probe")}, block=log)
    with anyio.CancelScope() as scope:
        async with AgentSystem(path=None) as system:
            await system.start(machine, Job())
            await wait_all_tasks_blocked()
            scope.cancel()
            await anyio.sleep_forever()
    assert log == ["enter probe", "stage stopped", "exit probe"]


async def test_the_entering_task_leaves_a_resource_whatever_task_started_the_session() -> None:
    log: list[str] = []
    machine = job_machine({"probe": Probe(log, "probe", task_bound=True)})
    # The session is started by a task that ends before the system does.
    async with AgentSystem(path=None) as system, anyio.create_task_group() as group:
        group.start_soon(system.run, machine, Job())
    assert log == ["enter probe", "exit probe"]


async def test_a_resource_that_reports_itself_open_is_left_alone() -> None:
    async with AgentSystem(path=None) as system:
        assert (await system.run(job_machine({"opened": Opened()}), Job())).ok


async def test_a_client_its_user_opened_stays_theirs() -> None:
    async with open_chat_server() as server:
        server.add(Canned.completion("one"), Canned.completion("two"))
        async with OpenAIChatClient("m", base_url=server.url, api_key="k") as client:
            agent = react_agent(client)
            assert agent.resources["model"] is client
            async with AgentSystem(path=None) as system:
                assert (await system.run(agent, ReactState(task="a"))).state.answer == "one"
            assert client.is_open  # the system did not close it
            async with AgentSystem(path=None) as system:
                assert (await system.run(agent, ReactState(task="b"))).state.answer == "two"
        assert not client.is_open


async def test_a_client_the_system_opened_is_closed_with_it_and_reopened_by_the_next() -> None:
    async with open_chat_server() as server:
        server.add(Canned.completion("one"), Canned.completion("two"))
        agent = react_agent(OpenAIChatClient("m", base_url=server.url, api_key="k"))
        async with AgentSystem(path=None) as system:
            assert (await system.run(agent, ReactState(task="a"))).state.answer == "one"
            assert agent.resources["model"].is_open  # type: ignore[attr-defined]
        assert not agent.resources["model"].is_open  # type: ignore[attr-defined]
        async with AgentSystem(path=None) as system:
            assert (await system.run(agent, ReactState(task="b"))).state.answer == "two"
        assert not agent.resources["model"].is_open  # type: ignore[attr-defined]


async def test_a_resource_that_cannot_open_stores_no_session(tmp_path: Path) -> None:
    log: list[str] = []
    probe = Probe(log, "db", fail=ConnectionRefusedError("nobody serves the db"))
    machine = job_machine({"db": probe})
    async with AgentSystem(path=tmp_path / "s.db") as system:
        with pytest.raises(ResourceUnavailable) as refused:
            await system.start(machine, Job(), session_id="s")
        assert (refused.value.resource, refused.value.machine) == ("db", "job")
        assert isinstance(refused.value.__cause__, ConnectionRefusedError)
        assert "resource 'db' of machine 'job' could not be opened" in str(refused.value)
        assert "ConnectionRefusedError: nobody serves the db" in str(refused.value)
        assert system.store is not None
        assert await system.store.sessions() == ()
        assert system.sessions() == []
        probe.fail = None  # the database is back: the next start opens it
        assert (await system.run(machine, Job(), session_id="s")).ok
    assert log == ["enter db", "exit db"]


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    async with made:
        yield made


async def test_resume_approve_and_recover_record_nothing_when_a_resource_cannot_open(
    store: Store,
) -> None:
    log: list[str] = []
    probe = Probe(log, "db", fail=ConnectionRefusedError("no db"))
    gated, plain = job_machine({"db": probe}, gated=True), job_machine({"db": probe})
    async with AgentSystem(store=store) as system:
        await Journal(store, gated, "paused").create(Job(session_id="paused"))
        await store.set_status("paused", "paused")
        await Journal(store, plain, "orphan").create(Job(session_id="orphan"))  # running, unleased
        before = {sid: await store.history(sid) for sid in ("paused", "orphan")}
        with pytest.raises(ResourceUnavailable):
            await system.stored(gated, "paused").approve()
        with pytest.raises(ResourceUnavailable):
            await system.resume(plain, "orphan")
        with pytest.raises(ResourceUnavailable):  # not skipped as if another system took it
            await system.recover(plain)
        for sid, events in before.items():
            assert await store.history(sid) == events  # no decision, no resume event
        assert [(await store.record(sid)).status for sid in before] == ["paused", "running"]
        assert [r.session_id for r in await system.orphans(plain)] == ["orphan"]
        probe.fail = None
        (handle,) = await system.recover(plain)
        assert (await handle.result()).ok
    assert log == ["enter db", "exit db"]


async def test_a_subgraphs_resources_are_opened_with_its_parent() -> None:
    log: list[str] = []
    child = job_machine({"probe": Probe(log, "child")}, name="child")

    @stage(next=L.FINISHED, name="check")
    async def check(view: StateView[Job]) -> Patch:
        log.append("parent stage")
        return Patch()

    parent = Machine(
        name="parent",
        state_type=Job,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.OBSERVING}, L.OBSERVING: {L.FINISHED}},
        stages={
            L.INITIALIZED: subgraph(
                child,
                name="sub",
                writes={"done"},
                input=lambda view: Job(),
                output=lambda done, view: Patch(done=done.done),
                next=L.OBSERVING,
            ),
            L.OBSERVING: check,
        },
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
    )
    async with AgentSystem(path=None) as system:
        result = await system.run(parent, Job())
    assert result.ok, result.failure
    assert result.state.done
    assert log == ["enter child", "parent stage", "exit child"]


async def test_recover_drives_a_real_model_agent_nobody_opened(store: Store) -> None:
    async with open_chat_server() as server:
        server.add(Canned.completion("recovered"))
        agent = react_agent(OpenAIChatClient("m", base_url=server.url, api_key="k"))
        await Journal(store, agent, "o").create(ReactState(task="go on", session_id="o"))
        async with AgentSystem(store=store) as system:
            (handle,) = await system.recover(agent)
            result = await handle.result()
    assert result.exit_reason.value == "finished", result.failure
    assert result.state.answer == "recovered"
    assert len(server.requests) == 1
