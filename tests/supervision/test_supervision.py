from __future__ import annotations

import contextlib
import functools
import math
import random
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import trio
import trio.testing

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    ExitReason,
    Fatal,
    History,
    Lifecycle,
    Machine,
    Patch,
    Recoverable,
    SessionBusy,
    SessionError,
    SessionNotFound,
    Stage,
    StateView,
    Transient,
)
from arkhon_rheo.errors import SystemNotRunning
from arkhon_rheo.protocols import ErrorClass, EventKind
from arkhon_rheo.protocols import stage as stage_fn
from arkhon_rheo.supervision import (
    Backoff,
    Classifier,
    RestartIntensity,
    RestartStrategy,
    RestartWindow,
)
from tests.support.helpers import on_virtual_clock

L = Lifecycle


def System(**options: Any) -> AgentSystem:
    return AgentSystem(path=None, **options)


class LoopState(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    steps: History[str] = History()
    answer: str = ""


Behaviour = Callable[["Probe", StateView[LoopState]], Patch]


class Probe:
    """Scripts what each stage does per call, and counts stage instances."""

    def __init__(self, **scripts: list[Any]) -> None:
        self.scripts = {name: list(script) for name, script in scripts.items()}
        self.instances: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def next_action(self, name: str) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        script = self.scripts.get(name)
        return script.pop(0) if script else "ok"


def loop_machine(probe: Probe, *, rounds: int = 1, **options: Any) -> Machine[LoopState]:
    """INITIALIZED -> THINKING -> ACTING -> OBSERVING -> (THINKING | FINISHED)."""

    def make(name: str, reads: set[str], nxt: Callable[[LoopState], Lifecycle]) -> type[Stage[Any]]:
        class Scripted(Stage[LoopState], name=name, reads=reads, writes={"steps", "answer"}):
            def __init__(self) -> None:
                probe.instances[name] = probe.instances.get(name, 0) + 1

            async def execute(self, view: StateView[LoopState]) -> Patch:
                action = probe.next_action(name)
                if isinstance(action, BaseException):
                    raise action
                if isinstance(action, tuple) and action[0] == "shielded":
                    action[2].set()  # ("shielded", seconds, event set on entry)
                    with anyio.CancelScope(shield=True):  # deaf to cancellation for a while
                        await anyio.sleep(action[1])
                elif isinstance(action, tuple):  # ("sleep", seconds[, then raise this])
                    await anyio.sleep(action[1])
                    if len(action) > 2:
                        raise action[2]
                if isinstance(action, Patch):
                    return action
                return Patch().append("steps", name)

            def next(self, state: LoopState) -> Lifecycle:
                return nxt(state)

        return Scripted

    def after_observe(state: LoopState) -> Lifecycle:
        return L.FINISHED if state.steps.count("observe") >= rounds else L.THINKING

    def finish_patch_ok(state: LoopState) -> bool:
        return state.steps.count("observe") >= 1

    return Machine(
        name="loop",
        state_type=LoopState,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        loop_state=L.THINKING,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.THINKING, L.FINISHED},
        },
        stages={
            L.INITIALIZED: make("load", {"steps"}, lambda s: L.THINKING),
            L.THINKING: make("think", {"steps"}, lambda s: L.ACTING),
            L.ACTING: make("act", {"steps"}, lambda s: L.OBSERVING),
            L.OBSERVING: make("observe", {"steps"}, after_observe),
        },
        invariants={L.FINISHED: [finish_patch_ok], **options.pop("invariants", {})},
        **options,
    )


# -- pure policies -----------------------------------------------------------------


def test_backoff_is_full_jitter_bounded_and_seeded() -> None:
    backoff = Backoff(base=0.5, cap=3.0, max_attempts=5)
    delays = [backoff.delay(n, random.Random(7)) for n in range(1, 6)]
    rng = random.Random(7)
    ceilings = [0.5, 1.0, 2.0, 3.0, 3.0]
    assert delays == [random.Random(7).uniform(0, c) for c in ceilings]
    for n, ceiling in enumerate(ceilings, start=1):
        assert 0 <= backoff.delay(n, rng) <= ceiling
    # A retry-after hint is a floor, even above the cap; a smaller one changes nothing.
    assert backoff.delay(1, random.Random(7), at_least=60.0) == 60.0
    assert backoff.delay(1, random.Random(7), at_least=0.0) == delays[0]
    assert Transient("x", retry_after=-3).retry_after == 0.0
    assert Transient("x").retry_after is None
    with pytest.raises(ConfigurationError):
        Backoff(max_attempts=0)
    with pytest.raises(ConfigurationError):
        Backoff(base=-1)


def test_restart_window_counts_within_the_window_only() -> None:
    window = RestartWindow(RestartIntensity(max_restarts=2, within=10.0))
    assert window.allow(0.0)
    assert window.allow(5.0)
    assert not window.allow(9.0)  # a third within 10 s
    assert window.allow(10.5)  # the one at 0.0 has left the window
    assert len(window) == 2
    with pytest.raises(ConfigurationError):
        RestartIntensity(within=0)


def test_restart_strategies_choose_like_otp() -> None:
    order = ["load", "think", "act", "observe"]
    assert RestartStrategy.ONE_FOR_ONE.affected(order, "act") == ["act"]
    assert RestartStrategy.ONE_FOR_ALL.affected(order, "act") == order
    assert RestartStrategy.REST_FOR_ONE.affected(order, "think") == ["think", "act", "observe"]
    with pytest.raises(ConfigurationError, match="nope"):
        RestartStrategy.ONE_FOR_ONE.affected(order, "nope")


def test_classifier_precedence() -> None:
    class RateLimited(Exception):
        pass

    classifier = Classifier({RateLimited: ErrorClass.TRANSIENT, KeyError: ErrorClass.FATAL})
    assert classifier.classify(RateLimited()) is ErrorClass.TRANSIENT
    assert classifier.classify(KeyError()) is ErrorClass.FATAL
    assert classifier.classify(TimeoutError()) is ErrorClass.TRANSIENT
    assert classifier.classify(ValueError()) is ErrorClass.RECOVERABLE
    # What an exception says it is wins over any rule.
    assert classifier.classify(Fatal("no")) is ErrorClass.FATAL
    wrapped = Transient("wrapped")
    wrapped.__cause__ = KeyError("x")
    assert classifier.classify(wrapped) is ErrorClass.TRANSIENT
    with pytest.raises(ConfigurationError, match="cancellation"):
        classifier.register(BaseException, ErrorClass.FATAL)


# -- sessions ------------------------------------------------------------------------

pytestmark = pytest.mark.anyio


async def test_a_session_runs_to_finished_with_audited_events() -> None:
    probe = Probe()
    machine = loop_machine(probe, rounds=2)
    async with System(seed=1) as system:
        handle = await system.start(machine, LoopState(), session_id="s1")
        seen = [event async for event in handle.events()]
        result = await handle.result()
    assert result.ok
    assert result.exit_reason is ExitReason.FINISHED
    assert result.state.lifecycle is L.FINISHED
    assert result.state.session_id == "s1"
    assert result.state.iteration == 2
    assert list(result.state.steps) == ["load", *["think", "act", "observe"] * 2]
    assert [e.seq for e in seen] == list(range(1, 8))
    assert [(e.from_state, e.to_state) for e in seen[:4]] == [
        (L.INITIALIZED, L.THINKING),
        (L.THINKING, L.ACTING),
        (L.ACTING, L.OBSERVING),
        (L.OBSERVING, L.THINKING),
    ]
    first = seen[1]
    assert first.stage == "think"
    assert first.kind is EventKind.STEP
    assert first.reads == frozenset({"steps"})
    assert first.writes == frozenset({"steps"})
    assert first.patch == Patch().append("steps", "think")
    assert first.started_at <= first.finished_at
    assert (await handle.history()) == tuple(seen)


async def test_transient_failures_are_retried_with_seeded_backoff() -> None:
    probe = Probe(act=[Transient("flaky"), TimeoutError("slow link")])
    machine = loop_machine(probe)
    async with System(seed=3, backoff=Backoff(base=0, cap=0, max_attempts=3)) as system:
        handle = await system.start(machine, LoopState())
        result = await handle.result()
    assert result.ok
    assert result.retries == 2
    assert result.restarts == 0
    assert probe.calls["act"] == 3
    act_event = next(e for e in (await handle.history()) if e.stage == "act")
    assert act_event.attempt == 3
    assert probe.instances["act"] == 1  # retried on the same instance


async def test_exhausted_transient_escalates_to_a_restart_and_recorded_error() -> None:
    probe = Probe(act=[Transient("1"), Transient("2")])
    machine = loop_machine(probe)
    async with System(seed=3, backoff=Backoff(base=0, cap=0, max_attempts=2)) as system:
        handle = await system.start(machine, LoopState())
        result = await handle.result()
    assert result.ok
    assert result.restarts == 1
    assert probe.instances["act"] == 2
    failures = [e for e in (await handle.history()) if e.kind is EventKind.FAILURE]
    assert len(failures) == 1
    record = failures[0].error
    assert record is not None
    assert (record.error_type, record.error_class, record.stage, record.attempt) == (
        "Transient",
        ErrorClass.RECOVERABLE,
        "act",
        2,
    )
    assert result.state.last_error == record


async def test_recoverable_restarts_the_stage_with_a_fresh_instance() -> None:
    probe = Probe(think=[ValueError("model output unreadable")])
    machine = loop_machine(probe)
    async with System() as system:
        handle = await system.start(machine, LoopState())
        result = await handle.result()
    assert result.ok
    assert result.restarts == 1
    assert probe.instances == {"load": 1, "think": 2, "act": 1, "observe": 1}
    failure = next(e for e in (await handle.history()) if e.kind is EventKind.FAILURE)
    assert failure.from_state is failure.to_state is L.THINKING
    assert failure.writes == frozenset({"last_error"})
    assert result.state.last_error is not None
    assert result.state.last_error.error_type == "ValueError"


async def test_recoverable_follows_the_error_route() -> None:
    probe = Probe(act=[Recoverable("tool crashed")])
    machine = loop_machine(probe, error_routes={L.ACTING: L.OBSERVING})
    async with System() as system:
        handle = await system.start(machine, LoopState())
        result = await handle.result()
    assert result.ok
    failure = next(e for e in (await handle.history()) if e.kind is EventKind.FAILURE)
    assert (failure.from_state, failure.to_state) == (L.ACTING, L.OBSERVING)
    assert "act" not in result.state.steps
    assert result.state.last_error is not None
    assert result.state.last_error.message == "tool crashed"


async def test_fatal_fails_the_session_with_a_structured_record() -> None:
    probe = Probe(act=[Fatal("credentials revoked")])
    machine = loop_machine(probe)
    async with System() as system:
        result = await system.run(machine, LoopState())
    assert result.exit_reason is ExitReason.FAILED
    assert not result.ok
    assert result.state.lifecycle is L.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "Fatal"
    assert result.failure.stage == "act"
    assert result.failure.lifecycle == "Acting"
    assert result.failure.exit_reason == "failed"
    assert list(result.state.steps) == ["load", "think"]


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (RestartStrategy.ONE_FOR_ONE, {"load": 1, "think": 1, "act": 2, "observe": 1}),
        (RestartStrategy.ONE_FOR_ALL, {"load": 2, "think": 2, "act": 2, "observe": 2}),
        (RestartStrategy.REST_FOR_ONE, {"load": 1, "think": 1, "act": 2, "observe": 2}),
    ],
)
async def test_restart_strategies(strategy: RestartStrategy, expected: dict[str, int]) -> None:
    probe = Probe(act=[Recoverable("once")])
    machine = loop_machine(probe)
    async with System(restart_strategy=strategy) as system:
        result = await system.run(machine, LoopState())
        assert system.statistics().actors == 0
    assert result.ok
    assert probe.instances == expected


async def test_restart_intensity_escalates_to_fatal() -> None:
    probe = Probe(think=[Recoverable("a"), Recoverable("b"), Recoverable("c")])
    machine = loop_machine(probe)
    intensity = RestartIntensity(max_restarts=2, within=60.0)
    async with System(restart_intensity=intensity) as system:
        result = await system.run(machine, LoopState())
    assert result.exit_reason is ExitReason.FAILED
    assert result.restarts == 2
    assert result.failure is not None
    # The record keeps the error that tipped the balance, and says the intensity ran out.
    assert result.failure.error_type == "Recoverable"
    assert result.failure.message == (
        "c [the restart intensity ran out: more than 2 restarts within 60 s (last: stage "
        "'think'); escalating to fatal. Fix the failing stage or relax the restart intensity]"
    )
    assert result.failure.error_class is ErrorClass.FATAL
    assert (result.failure.stage, result.failure.exit_reason) == ("think", "failed")


async def test_the_step_budget_bounds_every_session() -> None:
    probe = Probe()
    machine = loop_machine(probe, rounds=1_000)
    async with System(max_steps=10) as system:
        result = await system.run(machine, LoopState())
    assert result.exit_reason is ExitReason.MAX_STEPS
    assert result.state.lifecycle is L.FAILED
    assert result.failure is not None
    assert result.failure.exit_reason == "max_steps"
    assert result.steps == 10


async def test_one_sessions_failure_never_touches_another() -> None:
    doomed, healthy = Probe(think=[Fatal("bad")]), Probe()
    async with System() as system:
        first = await system.start(loop_machine(doomed), LoopState(), session_id="doomed")
        second = await system.start(loop_machine(healthy, rounds=3), LoopState())
        results = [await first.result(), await second.result()]
        assert system.statistics().running == 0
    assert [r.exit_reason for r in results] == [ExitReason.FAILED, ExitReason.FINISHED]
    assert results[1].state.iteration == 3


async def test_cancel_keeps_the_last_committed_state_and_is_not_a_failure() -> None:
    started = anyio.Event()

    class Waits(Probe):
        def next_action(self, name: str) -> Any:
            if name == "act":
                started.set()
                return ("sleep", 3600)
            return super().next_action(name)

    probe = Waits()
    async with System() as system:
        handle = await system.start(loop_machine(probe), LoopState())
        await started.wait()
        handle.cancel()
        result = await handle.result()
    assert result.exit_reason is ExitReason.CANCELLED
    assert result.failure is None
    assert result.state.lifecycle is L.ACTING
    assert list(result.state.steps) == ["load", "think"]


async def test_listener_failure_never_breaks_a_commit() -> None:
    seen: list[int] = []

    def flaky_listener(event: Any) -> None:
        seen.append(event.seq)
        raise RuntimeError("audit sink down")

    async with System(listeners=[flaky_listener]) as system:
        result = await system.run(loop_machine(Probe()), LoopState())
    assert result.ok
    assert seen == list(range(1, 5))


async def test_a_slow_event_consumer_never_blocks_the_session() -> None:
    async with System() as system:
        handle = await system.start(loop_machine(Probe(), rounds=5), LoopState())
        result = await handle.result()  # nobody has read a single event yet
        events = [event async for event in handle.events()]
    assert result.ok
    assert len(events) == result.steps == 16


async def test_bad_session_input_gets_clear_errors() -> None:
    machine = loop_machine(Probe())
    outside = System()
    with pytest.raises(ConfigurationError, match="max_steps"):
        System(max_steps=0)
    async with System() as system:
        with pytest.raises(ConfigurationError, match="starts in"):
            await system.start(machine, LoopState(lifecycle=L.THINKING))

        class Other(AgentState):
            lifecycle: Lifecycle = L.INITIALIZED

        with pytest.raises(ConfigurationError, match="runs on LoopState"):
            await system.start(machine, Other())  # type: ignore[misc]
        await system.start(machine, LoopState(), session_id="taken")
        with pytest.raises(SessionError, match="exists already"):
            await system.start(machine, LoopState(), session_id="taken")
        with pytest.raises(SessionNotFound, match="nope"):
            system.session("nope")
        assert system.sessions() == ["taken"]
        assert (await system.session("taken").result()).ok
    with pytest.raises(SystemNotRunning):
        await outside.start(machine, LoopState())


# -- virtual time --------------------------------------------------------------------


@on_virtual_clock
async def test_backoff_waits_exactly_the_seeded_delays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe(act=[Transient("1"), Transient("2")])
    backoff = Backoff(base=1.0, cap=30.0, max_attempts=3)
    start = trio.current_time()
    async with System(seed=11, backoff=backoff) as system:
        result = await system.run(loop_machine(probe), LoopState(), session_id="s")
    elapsed = trio.current_time() - start
    rng = random.Random("11/0")
    expected = backoff.delay(1, rng) + backoff.delay(2, rng)
    assert result.ok
    assert result.retries == 2
    assert elapsed == pytest.approx(expected)


@on_virtual_clock
async def test_backoff_waits_at_least_a_transient_retry_after_hint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The jitter would wait at most 0.5 s; the failure asks for 7 s, then 0 s.
    probe = Probe(act=[Transient("429", retry_after=7.0), Transient("429", retry_after=0.0)])
    backoff = Backoff(base=0.5, cap=0.5, max_attempts=3)
    start = trio.current_time()
    async with System(seed=11, backoff=backoff) as system:
        result = await system.run(loop_machine(probe), LoopState(), session_id="s")
    elapsed = trio.current_time() - start
    rng = random.Random("11/0")
    first, second = backoff.delay(1, rng), backoff.delay(2, rng)
    assert result.ok
    assert result.retries == 2
    assert elapsed == pytest.approx(max(first, 7.0) + second)


@on_virtual_clock
async def test_a_stage_past_its_deadline_is_cancelled_and_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    probe = Probe(act=[("sleep", 100.0)])
    machine = loop_machine(probe, deadlines={L.ACTING: 5.0})
    start = trio.current_time()
    async with System(backoff=Backoff(base=0, cap=0)) as system:
        result = await system.run(machine, LoopState())
    assert result.ok
    assert result.retries == 1
    assert trio.current_time() - start == pytest.approx(5.0)


@on_virtual_clock
async def test_a_session_stuck_in_a_hosted_stage_ends_within_the_shutdown_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Leaving the block stops the session at once. Its stage's actor runs in the
    # supervisor's own task (an inline activation), which nothing can take from
    # a shielded wait: the session ends when the stage does.
    entered = anyio.Event()
    probe = Probe(act=[("shielded", 50.0, entered)])
    ended: list[float] = []
    async with trio.open_nursery() as nursery, System(shutdown_timeout=7.0) as system:
        handle = await system.start(loop_machine(probe), LoopState())

        async def watch() -> None:
            result = await handle.result()
            assert result.exit_reason is ExitReason.CANCELLED
            ended.append(trio.current_time() - start)

        nursery.start_soon(watch)
        await entered.wait()
        start = trio.current_time()
    assert ended == [pytest.approx(50.0, abs=0.02)]


@on_virtual_clock
async def test_restarts_spread_beyond_the_window_do_not_escalate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Each failure comes 10 s after the previous one: never 2 within the 5 s window.
    probe = Probe(think=[("sleep", 10.0, Recoverable("again"))] * 4)
    intensity = RestartIntensity(max_restarts=1, within=5.0)
    async with System(restart_intensity=intensity) as system:
        result = await system.run(loop_machine(probe), LoopState())
    assert result.ok
    assert result.restarts == 4


async def test_logs_name_the_session_and_stage() -> None:
    from structlog.contextvars import merge_contextvars
    from structlog.testing import capture_logs

    probe = Probe(act=[Recoverable("once")])
    with capture_logs(processors=[merge_contextvars]) as logs:
        async with System() as system:
            await system.run(loop_machine(probe), LoopState(), session_id="logged")
    restarted = [entry for entry in logs if entry["event"] == "stages_restarted"]
    assert restarted
    assert restarted[0]["session_id"] == "logged"
    assert restarted[0]["stages"] == ["act"]


async def test_a_stages_own_log_lines_name_it_at_every_step() -> None:
    import structlog
    from structlog.contextvars import merge_contextvars
    from structlog.testing import capture_logs

    from arkhon_rheo.testing import ReferenceState, reference_machine

    logger = structlog.get_logger("user.stage")

    async def say(stage: str, cycle: int) -> None:
        logger.info("inside", said_by=stage, cycle=cycle)

    hooks = {name: functools.partial(say, name) for name in ("think", "act", "observe")}
    with capture_logs(processors=[merge_contextvars]) as logs:
        async with System() as system:
            await system.run(
                reference_machine(before=hooks), ReferenceState(cycles=3), session_id="told"
            )
    inside = [entry for entry in logs if entry["event"] == "inside"]
    assert [entry["said_by"] for entry in inside] == ["think", "act", "observe"] * 3
    assert all(entry["stage"] == entry["said_by"] for entry in inside)
    assert all(entry["session_id"] == "told" for entry in inside)


async def test_state_fields_typed_as_models_validate_in_every_shape() -> None:
    from pydantic import BaseModel, ConfigDict

    class Step(BaseModel):
        model_config = ConfigDict(frozen=True)
        text: str

    class Rich(AgentState):
        lifecycle: Lifecycle = L.INITIALIZED
        last: Step = Step(text="")
        maybe: Step | None = None
        steps: History[Step] = History()
        pairs: tuple[Step, ...] = ()

    @stage_fn(
        reads=(),
        writes={"last", "maybe", "steps", "pairs"},
        next=L.FINISHED,
    )
    async def write_all(view: StateView[Rich]) -> Patch:
        step = Step(text="x")
        return (
            Patch(last={"text": "dict becomes a model"}, maybe=step)
            .append("steps", step, {"text": "y"})
            .append("pairs", step)
        )

    machine = Machine(
        state_type=Rich,
        initial=L.INITIALIZED,
        transitions={L.INITIALIZED: {L.FINISHED}},
        stages={L.INITIALIZED: write_all},
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
    )
    async with System() as system:
        result = await system.run(machine, Rich())
    assert result.ok, result.failure
    assert result.state.last == Step(text="dict becomes a model")
    assert [s.text for s in result.state.steps] == ["x", "y"]
    assert result.state.pairs == (Step(text="x"),)


async def test_forget_drops_ended_sessions_only() -> None:
    started = anyio.Event()

    class Waits(Probe):
        def next_action(self, name: str) -> Any:
            if name == "act":
                started.set()
                return ("sleep", 3600)
            return super().next_action(name)

    async with System() as system:
        done = await system.start(loop_machine(Probe()), LoopState(), session_id="done")
        result = await done.result()
        running = await system.start(loop_machine(Waits()), LoopState(), session_id="running")
        await started.wait()
        with pytest.raises(SessionBusy, match="still running"):
            system.forget("running")
        system.forget("done")
        assert system.sessions() == ["running"]
        with pytest.raises(SessionNotFound):
            system.forget("done")
        assert (await done.result()) == result  # a held handle keeps working
        running.cancel()


async def test_next_must_return_the_machines_own_member() -> None:
    import enum

    class Phase(enum.StrEnum):
        INIT = "init"
        DONE = "done"
        FAILED = "failed"

    class PhaseState(AgentState):
        lifecycle: Phase = Phase.INIT

    def sloppy_next(state: PhaseState) -> Any:
        return "done"  # equal to Phase.DONE, but not the member

    @stage_fn(next=sloppy_next)
    async def sloppy(view: StateView[PhaseState]) -> Patch:
        return Patch()

    machine = Machine(
        state_type=PhaseState,
        initial=Phase.INIT,
        transitions={Phase.INIT: {Phase.DONE}},
        stages={Phase.INIT: sloppy},
        terminal={Phase.DONE, Phase.FAILED},
        failed=Phase.FAILED,
    )
    async with System() as system:
        result = await system.run(machine, PhaseState())
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "IllegalTransition"


async def test_a_broad_user_rule_cannot_make_a_contract_violation_retryable() -> None:
    probe = Probe(act=[Patch(lifecycle=L.FINISHED)])  # writes a supervisor-owned field
    classifier = Classifier({Exception: ErrorClass.TRANSIENT})
    async with System(classifier=classifier) as system:
        result = await system.run(loop_machine(probe), LoopState())
    assert result.exit_reason is ExitReason.FAILED
    assert result.failure is not None
    assert result.failure.error_type == "UndeclaredWrite"
    assert result.retries == 0


async def test_a_predicate_that_raises_is_a_typed_violation() -> None:
    from arkhon_rheo.errors import InvariantViolation

    def fragile(state: LoopState) -> bool:
        raise KeyError("oops")

    machine = loop_machine(Probe(), invariants={L.ACTING: [fragile]})
    async with System() as system:
        result = await system.run(machine, LoopState())
        assert result.failure is not None
        assert result.failure.error_type == "InvariantViolation"
        assert "raised KeyError" in result.failure.message
        starting = loop_machine(Probe(), invariants={L.INITIALIZED: [fragile]})
        with pytest.raises(InvariantViolation, match="raised KeyError"):
            await system.start(starting, LoopState())


def test_two_stages_may_not_share_a_name() -> None:
    @stage_fn(next=L.ACTING, name="twin")
    async def first(view: StateView[LoopState]) -> Patch:
        return Patch()

    @stage_fn(next=L.FINISHED, name="twin")
    async def second(view: StateView[LoopState]) -> Patch:
        return Patch()

    with pytest.raises(ConfigurationError, match="two different stages are named 'twin'"):
        Machine(
            state_type=LoopState,
            initial=L.INITIALIZED,
            transitions={L.INITIALIZED: {L.ACTING}, L.ACTING: {L.FINISHED}},
            stages={L.INITIALIZED: first, L.ACTING: second},
            terminal={L.FINISHED, L.FAILED},
            failed=L.FAILED,
        )


def shared_stage_machine(probe: Probe) -> Machine[LoopState]:
    """One stage class, "work", runs both ACTING and OBSERVING."""

    def make(name: str, nxt: Callable[[LoopState], Lifecycle]) -> type[Stage[Any]]:
        class Scripted(Stage[LoopState], name=name, reads={"steps"}, writes={"steps"}):
            def __init__(self) -> None:
                probe.instances[name] = probe.instances.get(name, 0) + 1

            async def execute(self, view: StateView[LoopState]) -> Patch:
                action = probe.next_action(name)
                if isinstance(action, BaseException):
                    raise action
                return Patch().append("steps", name)

            def next(self, state: LoopState) -> Lifecycle:
                return nxt(state)

        return Scripted

    work = make("work", lambda s: L.OBSERVING if s.lifecycle is L.ACTING else L.FINISHED)
    return Machine(
        name="shared",
        state_type=LoopState,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={
            L.INITIALIZED: {L.THINKING},
            L.THINKING: {L.ACTING},
            L.ACTING: {L.OBSERVING},
            L.OBSERVING: {L.FINISHED},
        },
        stages={
            L.INITIALIZED: make("load", lambda s: L.THINKING),
            L.THINKING: make("think", lambda s: L.ACTING),
            L.ACTING: work,
            L.OBSERVING: work,
        },
    )


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (RestartStrategy.ONE_FOR_ONE, {"load": 1, "think": 2, "work": 1}),
        (RestartStrategy.ONE_FOR_ALL, {"load": 2, "think": 2, "work": 2}),
        (RestartStrategy.REST_FOR_ONE, {"load": 1, "think": 2, "work": 2}),
    ],
)
async def test_restart_strategies_with_a_stage_serving_two_states(
    strategy: RestartStrategy, expected: dict[str, int]
) -> None:
    probe = Probe(think=[Recoverable("once")])
    machine = shared_stage_machine(probe)
    async with System(restart_strategy=strategy) as system:
        result = await system.run(machine, LoopState())
        assert system.statistics().actors == 0
    assert result.exit_reason is ExitReason.FINISHED
    assert result.restarts == 1
    assert list(result.state.steps) == ["load", "think", "work", "work"]
    assert probe.instances == expected


def test_restart_strategies_name_each_stage_once() -> None:
    order = ["load", "work", "think", "work"]
    assert RestartStrategy.ONE_FOR_ALL.affected(order, "think") == ["load", "work", "think"]
    assert RestartStrategy.REST_FOR_ONE.affected(order, "work") == ["work", "think"]
    assert RestartStrategy.REST_FOR_ONE.affected(order, "think") == ["think"]


class Abort(BaseException):
    """A user's BaseException: never classified, it must leave the system's block."""


async def test_a_base_exception_from_a_stage_leaves_the_block_and_crashes_the_session() -> None:
    probe = Probe(act=[Abort("operator pulled the plug")])
    machine = loop_machine(probe)
    waiting = loop_machine(Probe(load=[("sleep", math.inf)]))
    seen: list[ExitReason] = []
    with anyio.fail_after(20):  # a hang guard only: the block must end on its own
        with pytest.RaisesGroup(pytest.RaisesExc(Abort, match="pulled the plug")):
            async with System() as system:
                other = await system.start(waiting, LoopState(), session_id="s2")
                handle = await system.start(machine, LoopState(), session_id="s1")
                seen.append((await handle.result()).exit_reason)
                await anyio.sleep_forever()  # the escaped exception cancels the block
    result = await handle.result()
    assert result.exit_reason is ExitReason.CRASHED
    assert seen in ([], [ExitReason.CRASHED])  # an awaiter sees the crash or is cancelled
    assert result.failure is not None
    assert result.failure.error_type == "Abort"
    assert result.failure.message == "operator pulled the plug"
    assert result.failure.stage == "act"
    assert result.failure.exit_reason == "crashed"
    assert list(result.state.steps) == ["load", "think"]  # the last commit stands
    assert (await other.result()).exit_reason is ExitReason.CANCELLED  # the block ended
    assert probe.calls["act"] == 1  # never retried: a BaseException is not classified


async def test_a_crash_by_base_exception_is_stored_and_resumable() -> None:
    probe = Probe(act=[Abort("stop")])
    machine = loop_machine(probe)
    with anyio.fail_after(20), pytest.RaisesGroup(Abort):
        async with AgentSystem() as system:
            handle = await system.start(machine, LoopState(), session_id="s1")
            await handle.result()
            await anyio.sleep_forever()
    async with AgentSystem() as system:
        store = system.store
        assert store is not None
        assert (await store.load("s1")).record.status == "crashed"
        resumed = await system.resume(machine, "s1")
        result = await resumed.result()
    assert result.ok
    assert list(result.state.steps) == ["load", "think", "act", "observe"]


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "interrupt"])
async def test_interrupts_from_a_stage_leave_the_block_too(
    error: BaseException, anyio_backend: str
) -> None:
    if anyio_backend == "asyncio":
        pytest.skip("asyncio stops its whole event loop on these; trio hands them on")
    machine = loop_machine(Probe(act=[error]))
    with anyio.fail_after(20), pytest.RaisesGroup(type(error)):
        async with System() as system:
            handle = await system.start(machine, LoopState())
            await anyio.sleep_forever()
    assert (await handle.result()).exit_reason is ExitReason.CRASHED


@pytest.mark.parametrize("stored", [False, True], ids=["memory", "store"])
async def test_a_session_cancelled_by_a_listener_commits_nothing_after(stored: bool) -> None:
    # Steps run back to back between yields: a cancel made while one commits (here,
    # by a listener of its events) still stops the session before its next step.
    from arkhon_rheo import AgentSystem, ExitReason
    from arkhon_rheo.store import MemoryStore
    from arkhon_rheo.testing import ReferenceState, reference_machine

    handles: list[Any] = []
    seen: list[int] = []

    def cancel_at_two(event: Any) -> None:
        seen.append(event.seq)
        if event.seq == 2:
            handles[0].cancel()

    release = anyio.Event()

    async def hold(cycle: int) -> None:
        if cycle == 0:
            await release.wait()  # until the handle is out: then steps run back to back

    store = MemoryStore()
    async with contextlib.AsyncExitStack() as stack:
        if stored:
            await stack.enter_async_context(store)
        system = await stack.enter_async_context(
            AgentSystem(store=store if stored else None, path=None, listeners=[cancel_at_two])
        )
        machine = reference_machine(before={"think": hold})
        handles.append(await system.start(machine, ReferenceState(cycles=5)))
        release.set()
        result = await handles[0].result()
        history = await handles[0].history()
    assert result.exit_reason is ExitReason.CANCELLED
    assert seen == [1, 2]
    assert [event.seq for event in history] == [1, 2]
    assert len(result.state.steps) == 1
