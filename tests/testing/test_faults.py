"""FaultPlan: every fault kind through the library's seams, on both backends, reproducibly."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    Machine,
    Patch,
    StateView,
    StoreError,
    stage,
)
from arkhon_rheo import Lifecycle as L
from arkhon_rheo.protocols import ToolCall
from arkhon_rheo.react import Calls, Limits, ReactState, StopReason, react_agent
from arkhon_rheo.store import MemoryStore
from arkhon_rheo.supervision import Backoff, ExitReason
from arkhon_rheo.testing import (
    FaultCall,
    FaultKind,
    FaultPlan,
    InjectedFault,
    ScriptedModel,
    chaos_run,
    fault_class,
)
from arkhon_rheo.tools import Toolbox, tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

FAST = Backoff(base=0.0, cap=0.0)


class Job(AgentState):
    lifecycle: L = L.INITIALIZED
    n: int = 0
    answer: str = ""


runs: list[int] = []


@stage(reads={"n"}, writes={"answer"}, next=L.FINISHED)
async def work(view: StateView[Job]) -> Patch:
    return Patch(answer=f"done {view.n}")


def job_machine(deadline: float | None = None) -> Machine[Job]:
    return Machine(
        name="job",
        state_type=Job,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: work},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        invariants={L.FINISHED: [lambda s: bool(s.answer)]},
        deadlines={L.INITIALIZED: deadline} if deadline is not None else None,
    )


STAGE_CASES: list[tuple[str, Any, ExitReason, int, int]] = [
    # (kind, how to add it, exit reason, retries, restarts)
    ("transient", lambda s: s.transient(nth=1), ExitReason.FINISHED, 1, 0),
    ("rate_limited", lambda s: s.rate_limited(0.001, nth=1), ExitReason.FINISHED, 1, 0),
    ("recoverable", lambda s: s.recoverable(nth=1), ExitReason.FINISHED, 0, 1),
    ("fatal", lambda s: s.fatal(nth=1), ExitReason.FAILED, 0, 0),
    ("error", lambda s: s.raises(lambda: ValueError("boom"), nth=1), ExitReason.FINISHED, 0, 1),
    ("latency", lambda s: s.latency(0.001, nth=1), ExitReason.FINISHED, 0, 0),
    ("hang", lambda s: s.hang(nth=1), ExitReason.FINISHED, 1, 0),  # its deadline: retried
]


@pytest.mark.parametrize(("kind", "add", "reason", "retries", "restarts"), STAGE_CASES)
async def test_each_stage_fault_is_handled_by_its_class(
    kind: str, add: Any, reason: ExitReason, retries: int, restarts: int
) -> None:
    plan = FaultPlan(seed=1)
    add(plan.stage("work"))
    machine = job_machine(deadline=0.02 if kind == "hang" else None)
    async with AgentSystem(path=None, backoff=FAST, fault_plan=plan) as system:
        result = await system.run(machine, Job(n=1), session_id="s")
    assert (result.exit_reason, result.retries, result.restarts) == (reason, retries, restarts)
    assert plan.faults() == (InjectedFault("stage:work", "s", 1, FaultKind(kind)),)
    if reason is ExitReason.FINISHED:
        assert result.state.answer == "done 1"
    else:
        assert result.failure is not None
        assert result.failure.error_type == "Fatal"


@tool(timeout=5)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent(script: list[Any]) -> tuple[Machine[ReactState], ScriptedModel]:
    model = ScriptedModel(script)
    return react_agent(model, Toolbox(add), system_prompt=None), model


ADD = ToolCall(id="1", name="add", arguments='{"a": 2, "b": 3}')


@pytest.mark.parametrize(
    ("configure", "kind"),
    [
        (lambda p: p.model().transient(nth=1), FaultKind.TRANSIENT),
        (lambda p: p.model().rate_limited(0.001, nth=1), FaultKind.RATE_LIMITED),
        (lambda p: p.model().recoverable(nth=1), FaultKind.RECOVERABLE),
        (lambda p: p.model().latency(0.001, nth=1), FaultKind.LATENCY),
    ],
)
async def test_model_errors_go_through_the_engines_model_call(
    configure: Any, kind: FaultKind
) -> None:
    plan = FaultPlan()
    configure(plan)
    machine, model = agent([ADD, "5"])
    async with AgentSystem(path=None, backoff=FAST, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="2+3"), session_id="r")
    assert result.ok, result.failure
    assert result.state.answer == "5"
    assert plan.faults() == (InjectedFault("model", "r", 1, kind),)
    assert len(model.requests) == 2  # a fault before the call: the model never saw it


async def test_a_malformed_reply_gets_a_format_retry() -> None:
    plan = FaultPlan()
    plan.model().malformed_reply(nth=1)
    machine, _model = agent(["ignored", ADD, "5"])
    async with AgentSystem(path=None, backoff=FAST, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="2+3"), session_id="r")
    assert result.ok, result.failure
    assert result.state.answer == "5"
    bad = [m for m in result.state.messages if getattr(m, "is_error", False)]
    assert bad
    assert "not valid JSON" in str(bad[0].content)


async def test_a_truncated_reply_is_cut_in_half_and_marked_length() -> None:
    plan = FaultPlan()
    plan.model().truncated_reply(nth=2)
    machine, _ = agent([ADD, "The sum is 5."])
    async with AgentSystem(path=None, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="2+3"), session_id="r")
    # The engine does not check finish_reason: a truncated answer is taken as it is.
    assert (result.state.answer, result.state.exit) == ("The su", StopReason.ANSWERED)


async def test_a_streamed_reply_is_faulted_too() -> None:
    plan = FaultPlan()
    plan.model().truncated_reply(nth=1)
    model = ScriptedModel(["abcdef"])
    machine = react_agent(model, (), system_prompt=None, calls=Calls(stream=True))
    async with AgentSystem(path=None, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="x"), session_id="r")
    assert result.state.answer == "abc"


@pytest.mark.parametrize(("failures", "stage_retries"), [("observe", 0), ("escalate", 1)])
async def test_a_tool_timeout_is_retried(failures: Any, stage_retries: int) -> None:
    # Observed (the engine's default): the toolbox tries the call again within the
    # act step; escalated: the supervisor retries the act stage.
    plan = FaultPlan()
    plan.tool("add").tool_timeout(nth=1)
    model = ScriptedModel([ADD, "5"])
    machine = react_agent(
        model,
        Toolbox(add),
        system_prompt=None,
        calls=Calls(tool_failures=failures),
    )
    async with AgentSystem(path=None, backoff=FAST, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="2+3"), session_id="r")
    assert result.ok
    assert result.state.answer == "5"
    assert result.retries == stage_retries
    assert plan.faults() == (InjectedFault("tool:add", "r", 1, FaultKind.TOOL_TIMEOUT),)
    assert plan.calls("tool:add", "r") == 2


@pytest.mark.parametrize(
    ("configure", "reason"),
    [
        (lambda s: s.hang(nth=1), ExitReason.FINISHED),  # the act stage's deadline: retried
        (lambda s: s.raises(lambda: RuntimeError("no route"), nth=1), ExitReason.FINISHED),
        (lambda s: s.fatal(nth=1), ExitReason.FAILED),
    ],
)
async def test_tool_faults(configure: Any, reason: ExitReason) -> None:
    plan = FaultPlan()
    configure(plan.tool())  # every tool
    model = ScriptedModel([ADD, "5", "5"])
    machine = react_agent(
        model,
        Toolbox(add),
        system_prompt=None,
        limits=Limits(deadlines={L.ACTING: 0.02}),
    )
    async with AgentSystem(path=None, backoff=FAST, fault_plan=plan) as system:
        result = await system.run(machine, ReactState(task="2+3"), session_id="r")
    assert result.exit_reason is reason
    if reason is ExitReason.FINISHED:
        assert result.state.answer == "5"


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@pytest.mark.parametrize("kind", [FaultKind.DISK_FULL, FaultKind.DATABASE_LOCKED])
async def test_a_store_write_failure_refuses_the_commit(
    where: str, kind: FaultKind, tmp_path: Path
) -> None:
    plan = FaultPlan()
    schedule = plan.store()
    (schedule.disk_full if kind is FaultKind.DISK_FULL else schedule.database_locked)(nth=1)
    options: dict[str, Any] = (
        {"store": MemoryStore()} if where == "memory" else {"path": tmp_path / "f.db"}
    )
    store = options.get("store")
    async with (
        MemoryStore() if store is None else store,
        AgentSystem(**options, fault_plan=plan) as system,
    ):
        result = await system.run(job_machine(), Job(n=1), session_id="s")
        stored = await system.stored(job_machine(), "s").history()
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "StoreError"
    assert result.state.answer == ""  # the refused patch never became authoritative
    assert [event.kind.value for event in stored] == ["failure"]  # the step was never stored
    message = "disk is full" if kind is FaultKind.DISK_FULL else "database is locked"
    assert message in result.failure.message


async def test_a_predicate_chooses_the_calls() -> None:
    plan = FaultPlan()
    plan.stage("work").fatal(when=lambda call: call.session_id == "b")
    async with AgentSystem(path=None, fault_plan=plan) as system:
        a = await system.run(job_machine(), Job(), session_id="a")
        b = await system.run(job_machine(), Job(), session_id="b")
    assert (a.exit_reason, b.exit_reason) == (ExitReason.FINISHED, ExitReason.FAILED)


async def test_installed_applies_to_sessions_started_in_the_block_only() -> None:
    plan = FaultPlan()
    plan.stage().fatal()
    async with AgentSystem(path=None) as system:
        before = await system.run(job_machine(), Job(), session_id="before")
        with plan.installed():
            inside = await system.run(job_machine(), Job(), session_id="inside")
        after = await system.run(job_machine(), Job(), session_id="after")
    assert [r.exit_reason for r in (before, inside, after)] == [
        ExitReason.FINISHED,
        ExitReason.FAILED,
        ExitReason.FINISHED,
    ]


def test_bad_rules_get_clear_errors() -> None:
    plan = FaultPlan()
    with pytest.raises(ConfigurationError, match="applies to the model target"):
        plan.stage("work").malformed_reply()
    with pytest.raises(ConfigurationError, match="applies to the store target"):
        plan.tool("x").disk_full()
    with pytest.raises(ConfigurationError, match="rate must be"):
        plan.model().transient(rate=1.5)
    with pytest.raises(ConfigurationError, match="nth must be"):
        plan.model().transient(nth=0)
    with pytest.raises(ConfigurationError, match="unknown fault target"):
        plan.on("disk")
    with pytest.raises(ConfigurationError, match="seed must be"):
        FaultPlan(seed="x")  # type: ignore[arg-type]


def test_rates_are_hashed_per_call_and_roughly_right() -> None:
    plan = FaultPlan(seed=3)
    plan.stage("s").transient(rate=0.1)
    calls = [FaultCall("stage:s", f"sess-{i}", 1, {}) for i in range(2000)]
    fired = [plan.decide(call) is not None for call in calls]
    assert 140 <= sum(fired) <= 260
    assert fired == [plan.decide(call) is not None for call in calls]  # pure
    other = FaultPlan(seed=4)
    other.stage("s").transient(rate=0.1)
    assert fired != [other.decide(call) is not None for call in calls]


def _faulted_run(backend: str) -> tuple[tuple[InjectedFault, ...], dict[str, int]]:
    plan = FaultPlan(seed=11)
    plan.stage("think").transient(rate=0.3).recoverable(rate=0.1)
    plan.model().rate_limited(0.0, rate=0.2)
    plan.tool("add").tool_timeout(rate=0.3)

    async def main() -> dict[str, int]:
        outcomes: dict[str, int] = {}
        async with AgentSystem(path=None, backoff=FAST, seed=5, fault_plan=plan) as system:
            handles = []
            for i in range(6):
                machine, _ = agent([ADD, ADD, "5"] * 4)
                handles.append(
                    (machine, await system.start(machine, ReactState(task="x"), session_id=f"s{i}"))
                )
            for _, handle in handles:
                result = await handle.result()
                outcomes[result.session_id] = result.retries * 100 + result.restarts
        return outcomes

    outcomes = anyio.run(main, backend=backend)
    return plan.faults(), outcomes


def test_the_same_seed_gives_the_same_faults_on_asyncio_and_trio() -> None:
    on_asyncio = _faulted_run("asyncio")
    on_trio = _faulted_run("trio")
    assert on_asyncio[0]  # something was injected
    assert on_asyncio == on_trio


async def test_a_chaos_run_reports_outcomes_by_fault_class() -> None:
    plan = FaultPlan(seed=2)
    plan.stage("work").fatal(rate=0.1).recoverable(rate=0.1).transient(rate=0.2).latency(
        0.001, rate=0.1
    )
    report = await chaos_run(
        job_machine(), lambda i: Job(n=i), sessions=40, plan=plan, backoff=FAST
    )
    assert report.ok, report.table()
    assert sum(report.outcomes.values()) == 40
    assert set(report.by_fault_class.get("fatal", {})) <= {"failed"}
    for cls in ("none", "latency", "transient", "recoverable"):
        assert set(report.by_fault_class.get(cls, {})) <= {"finished"}, report.table()
    assert report.faults["stage:work"]["fatal"] == report.outcomes.get("failed", 0)
    assert report.retries == report.faults["stage:work"].get("transient", 0)
    data = json.loads(report.to_json())
    assert data["hung"] == []
    assert data["violations"] == []
    assert data["ok"]
    assert "hung (> 60 s)" in str(report)
    assert "fault: stage:work fatal" in report.table()


async def test_a_chaos_run_counts_a_hung_session() -> None:
    plan = FaultPlan()
    plan.stage("work").hang(when=lambda call: call.session_id == "chaos-1")
    report = await chaos_run(job_machine(), lambda i: Job(n=i), sessions=3, plan=plan,
                             hang_after=0.05)  # fmt: skip
    assert report.hung == ("chaos-1",)
    assert not report.ok
    assert report.outcomes == {"finished": 2, "cancelled": 1}


async def test_a_chaos_run_checks_invariants_and_replays(tmp_path: Path) -> None:
    plan = FaultPlan(seed=9)
    plan.stage().transient(rate=0.3)
    async with AgentSystem(path=tmp_path / "c.db", backoff=FAST) as system:
        report = await chaos_run(
            job_machine(),
            lambda i: Job(n=i),
            sessions=5,
            plan=plan,
            system=system,
            verify_replay=True,
            check=lambda r: None if r.state.answer.endswith(r.session_id[-1]) else "wrong",
        )
    assert report.ok, report.table()
    assert report.outcomes == {"finished": 5}


def test_fault_class_takes_the_most_severe() -> None:
    assert fault_class([]) == "none"
    assert fault_class([FaultKind.LATENCY, FaultKind.TOOL_TIMEOUT]) == "transient"
    assert fault_class([FaultKind.TRANSIENT, FaultKind.DISK_FULL]) == "fatal"


async def test_store_error_is_a_store_error() -> None:
    plan = FaultPlan()
    plan.store().disk_full()
    with plan.installed():
        async with MemoryStore() as store:
            with pytest.raises(StoreError, match="disk is full"):
                await store.append("x", [])
