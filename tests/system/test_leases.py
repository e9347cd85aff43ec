"""One driver per session: in one system (claims), and in the store (leases, given up once)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

import anyio
import pytest

from arkhon_rheo import (
    AgentState,
    AgentSystem,
    ConfigurationError,
    History,
    Lifecycle,
    Machine,
    Patch,
    SessionBusy,
    SessionError,
    SessionLocked,
    SessionNotFound,
    StateView,
    stage,
)
from arkhon_rheo.protocols import EventKind, Gate
from arkhon_rheo.store import MemoryStore, SQLiteStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Sequence
    from pathlib import Path
    from types import TracebackType

    from arkhon_rheo.protocols import (
        LeaseRecord,
        LoadedSession,
        NewMessage,
        SessionRecord,
        Store,
        StoredEffect,
        StoredEvent,
        StoredMessage,
    )
    from arkhon_rheo.protocols._store import StoreStatistics

pytestmark = pytest.mark.anyio

L = Lifecycle
Mode = Literal["before", "after", "later"]


class Tally(AgentState):
    lifecycle: Lifecycle = L.INITIALIZED
    marks: History[str] = History()


class Stages:
    """Counts each stage's calls; ``second`` can hold (block until cancelled)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.interrupted: Counter[str] = Counter()
        self.hold = False
        self.entered = anyio.Event()


def tally_machine(stages: Stages, *gates: Gate) -> Machine[Tally]:
    @stage(reads=(), writes={"marks"}, next=L.THINKING)
    async def first(view: StateView[Tally]) -> Patch:
        stages.calls["first"] += 1
        return Patch().append("marks", "first")

    @stage(reads=(), writes={"marks"}, next=L.FINISHED)
    async def second(view: StateView[Tally]) -> Patch:
        stages.calls["second"] += 1
        if stages.hold:
            stages.interrupted["second"] += 1
            stages.entered.set()
            await anyio.sleep_forever()
        return Patch().append("marks", "second")

    return Machine(
        name="tally",
        state_type=Tally,
        initial=L.INITIALIZED,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.INITIALIZED: {L.THINKING}, L.THINKING: {L.FINISHED}},
        stages={L.INITIALIZED: first, L.THINKING: second},
        gates=gates,
    )


class CountingStore:
    """A store delegating to a real one, counting leases and cancelling at its Nth call.

    Once armed (`arm`), calls made from the armed task are counted; at the Nth,
    the given scope is cancelled: ``"before"`` the call reaches the real store,
    ``"after"`` it did (its result is lost: the caller sees the cancellation), or
    ``"later"`` (the call returns; the cancellation lands at the caller's next
    checkpoint, wherever that is).
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.acquired = 0
        self.released = 0
        self.calls = 0
        self._task: int | None = None
        self._at = 0
        self._mode: Mode = "before"
        self._scope: anyio.CancelScope | None = None

    def arm(self, scope: anyio.CancelScope, at: int, mode: Mode) -> None:
        self._task, self._scope, self._at, self._mode = anyio.get_current_task().id, scope, at, mode
        self.calls = 0

    def disarm(self) -> None:
        self._task = self._scope = None

    async def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        hit = False
        if self._task == anyio.get_current_task().id:
            self.calls += 1
            hit = self.calls == self._at
        if hit and self._mode == "before":
            assert self._scope is not None
            self._scope.cancel()
            await anyio.lowlevel.checkpoint()
        result = await call()
        if hit and self._mode != "before":
            assert self._scope is not None
            self._scope.cancel()
            if self._mode == "after":
                await anyio.lowlevel.checkpoint()
        return result

    async def __aenter__(self) -> CountingStore:
        await self.inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self.inner.__aexit__(exc_type, exc, tb)

    async def create_session(
        self,
        session_id: str,
        *,
        machine: str,
        snapshot: Any,
        parent: str | None = None,
        status: str = "running",
        fingerprint: Any = None,
    ) -> SessionRecord:
        record: SessionRecord = await self._call(
            lambda: self.inner.create_session(
                session_id,
                machine=machine,
                snapshot=snapshot,
                parent=parent,
                status=status,
                fingerprint=fingerprint,
            )
        )
        return record

    async def record(self, session_id: str) -> SessionRecord:
        found: SessionRecord = await self._call(lambda: self.inner.record(session_id))
        return found

    async def leases(self) -> tuple[LeaseRecord, ...]:
        found: tuple[LeaseRecord, ...] = await self._call(self.inner.leases)
        return found

    async def append(
        self,
        session_id: str,
        events: Sequence[StoredEvent],
        *,
        snapshot: tuple[int, Any] | None = None,
        status: str | None = None,
        applied: int | None = None,
        posts: Sequence[NewMessage] = (),
        owner: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
    ) -> None:
        await self._call(
            lambda: self.inner.append(
                session_id,
                events,
                snapshot=snapshot,
                status=status,
                applied=applied,
                posts=posts,
                owner=owner,
                waiting=waiting,
                accepts=accepts,
            )
        )

    async def load(self, session_id: str) -> LoadedSession:
        loaded: LoadedSession = await self._call(lambda: self.inner.load(session_id))
        return loaded

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        events: tuple[StoredEvent, ...] = await self._call(lambda: self.inner.history(session_id))
        return events

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        found: tuple[int, Any] = await self._call(lambda: self.inner.snapshot_at(session_id, seq))
        return found

    async def sessions(self) -> tuple[SessionRecord, ...]:
        records: tuple[SessionRecord, ...] = await self._call(self.inner.sessions)
        return records

    async def set_status(self, session_id: str, status: str, *, owner: str | None = None) -> None:
        await self._call(lambda: self.inner.set_status(session_id, status, owner=owner))

    async def acquire(
        self,
        session_id: str,
        owner: str,
        *,
        ttl: float,
        replacing: str | None = None,
        renew: bool = False,
    ) -> None:
        if owner != "probe":
            self.acquired += 1
        await self._call(
            lambda: self.inner.acquire(session_id, owner, ttl=ttl, replacing=replacing, renew=renew)
        )

    async def release(self, session_id: str, owner: str) -> None:
        if owner != "probe":
            self.released += 1
        await self._call(lambda: self.inner.release(session_id, owner))

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        posted: tuple[StoredMessage, bool] = await self._call(
            lambda: self.inner.post(session_id, message, capacity=capacity)
        )
        return posted

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        found: tuple[StoredMessage, ...] = await self._call(lambda: self.inner.pending(session_id))
        return found

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        found: tuple[StoredMessage, ...] = await self._call(lambda: self.inner.messages(session_id))
        return found

    async def park(
        self,
        session_id: str,
        owner: str | None,
        *,
        status: str,
        waiting: Any,
        accepts: Collection[str],
        now: float,
    ) -> bool:
        parked: bool = await self._call(
            lambda: self.inner.park(
                session_id, owner, status=status, waiting=waiting, accepts=accepts, now=now
            )
        )
        return parked

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        found: tuple[tuple[SessionRecord, ...], float | None] = await self._call(
            lambda: self.inner.waking(now)
        )
        return found

    async def begin_effect(
        self, session_id: str, key: str, *, tool: str, arguments: Any, retry: bool = False
    ) -> tuple[StoredEffect, bool]:
        began: tuple[StoredEffect, bool] = await self._call(
            lambda: self.inner.begin_effect(
                session_id, key, tool=tool, arguments=arguments, retry=retry
            )
        )
        return began

    async def finish_effect(
        self, session_id: str, key: str, *, result: Any = None, error: str | None = None
    ) -> StoredEffect:
        finished: StoredEffect = await self._call(
            lambda: self.inner.finish_effect(session_id, key, result=result, error=error)
        )
        return finished

    async def effects(self, session_id: str) -> tuple[StoredEffect, ...]:
        found: tuple[StoredEffect, ...] = await self._call(lambda: self.inner.effects(session_id))
        return found

    def statistics(self) -> StoreStatistics:
        return self.inner.statistics()


@pytest.fixture(params=["memory", "sqlite"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], CountingStore]:
    """A factory of fresh stores (each its own file), wrapped to count leases."""
    made = 0

    def make() -> CountingStore:
        nonlocal made
        made += 1
        inner: Store = (
            MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / f"{made}.db")
        )
        return CountingStore(inner)

    return make


async def is_leased(store: Store, session_id: str) -> bool:
    """Whether some owner holds the session's lease (a probe owner tries to take it)."""
    try:
        await store.acquire(session_id, "probe", ttl=60)
    except SessionLocked:
        return True
    await store.release(session_id, "probe")
    return False


# -- two calls of one system on one session: one wins -----------------------------


async def _stopped(system: AgentSystem, machine: Machine[Tally], stages: Stages) -> None:
    """Leave session "s" stored, not running, mid-way (its second stage interrupted)."""
    stages.hold = True
    handle = await system.start(machine, Tally(), session_id="s")
    await stages.entered.wait()
    handle.cancel()
    await handle.result()
    stages.hold = False


Race = tuple[str, str]
RACES: list[tuple[Race, bool]] = [
    (("resume", "resume"), True),
    (("resume", "rollback"), True),
    (("rollback", "resume"), True),
    (("decide", "decide"), True),
    (("start", "start"), True),
    (("start", "start"), False),  # no store to refuse the second: only the system can
    (("fork", "fork"), True),
    (("fork", "start"), True),
]


@pytest.mark.parametrize(
    ("race", "stored"),
    RACES,
    ids=["-".join(race) + ("" if stored else "-memory-only") for race, stored in RACES],
)
async def test_two_calls_on_one_session_here_one_wins(
    race: Race, stored: bool, new_store: Callable[[], CountingStore]
) -> None:
    stages = Stages()
    gated = "decide" in race
    machine = tally_machine(stages, *([Gate.before("second")] if gated else []))
    store = new_store()
    async with store, AgentSystem(store=store if stored else None, path=None) as system:
        if gated:
            await (await system.start(machine, Tally(), session_id="s")).result()
        elif "resume" in race or "rollback" in race:
            await _stopped(system, machine, stages)
        elif "fork" in race:
            await system.run(machine, Tally(), session_id="s")
        target = "f" if "fork" in race else "s"
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "resume": lambda: system.resume(machine, "s"),
            "rollback": lambda: system.stored(machine, "s").rollback(1),
            "decide": lambda: system.stored(machine, "s").approve(),
            "start": lambda: system.start(machine, Tally(), session_id=target),
            "fork": lambda: system.stored(machine, "s").fork(new_id=target),
        }
        outcomes: list[object] = []

        async def attempt(op: str) -> None:
            try:
                outcomes.append(await calls[op]())
            except SessionError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for op in race:
                tg.start_soon(attempt, op)

        errors = [o for o in outcomes if isinstance(o, Exception)]
        assert len(errors) == 1, outcomes
        assert "busy here" in str(errors[0])
        assert isinstance(errors[0], SessionBusy)
        assert errors[0].session_id == target
        handles = [system.session(sid) for sid in system.sessions()]
        for handle in handles:
            await handle.result()
        if stored:
            events = [
                e for sid in {"s", target} for e in await system.stored(machine, sid).history()
            ]
        else:
            events = [e for handle in handles for e in (await handle.history())]
        steps = Counter(e.stage for e in events if e.kind is EventKind.STEP)
    # Every stage ran once per committed step, bar the run a cancellation cut short.
    assert stages.calls == steps + stages.interrupted


# -- every lease taken is given up once, cancelled or not ---------------------------

OPS = ["start", "resume", "decide", "rollback", "fork"]


@pytest.mark.parametrize("mode", ["before", "after", "later"])
@pytest.mark.parametrize("op", OPS)
async def test_a_cancelled_operation_gives_its_lease_up_once(
    op: str, mode: Mode, new_store: Callable[[], CountingStore]
) -> None:
    at = 0
    while True:
        at += 1
        assert at < 50, "the operation never completed"
        stages = Stages()
        machine = tally_machine(stages, *([Gate.before("second")] if op == "decide" else []))
        store = new_store()
        async with store, AgentSystem(store=store, lease_ttl=3600) as system:
            if op == "resume":
                await _stopped(system, machine, stages)
            elif op != "start":
                await system.run(machine, Tally(), session_id="s")
            stages.hold = True  # a launched session stays running until cancelled
            with anyio.CancelScope() as scope:
                store.arm(scope, at, mode)
                if op == "start":
                    await system.start(machine, Tally(), session_id="s")
                elif op == "resume":
                    await system.resume(machine, "s")
                elif op == "decide":
                    await system.stored(machine, "s").approve()
                elif op == "rollback":
                    await system.stored(machine, "s").rollback(1)
                else:
                    await system.stored(machine, "s").fork(new_id="f")
            store.disarm()
            completed = store.calls < at

            running = [system.session(s) for s in system.sessions()]
            running = [handle for handle in running if not handle.done]
            assert len(running) <= 1
            for sid in ("s", "f"):
                driven = any(handle.session_id == sid for handle in running)
                assert await is_leased(store, sid) is driven, (at, sid)
            for handle in running:
                handle.cancel()
                await handle.result()
                assert not await is_leased(store, handle.session_id)
            # The session is free here: no claim outlived the call.
            for sid in ("s", "f"):
                with pytest.raises((ConfigurationError, SessionNotFound)):
                    await system.stored(machine, sid).rollback(10**6)
            assert store.acquired == store.released, (at, store.acquired, store.released)
        if completed:
            assert not scope.cancel_called
            break


async def test_leaving_a_store_system_keeps_the_blocks_own_error_under_cancellation() -> None:
    # The body fails while an enclosing scope is being cancelled: stopping the lease
    # renewals on the way out meets that cancellation, and must not replace the error.
    caught: BaseException | None = None
    with anyio.CancelScope() as scope:
        try:
            async with AgentSystem(store=MemoryStore()):
                scope.cancel()
                raise ValueError("the host's own failure")
        except ValueError as exc:
            caught = exc
    assert isinstance(caught, ValueError)
    assert str(caught) == "the host's own failure"


async def test_leaving_a_store_system_inside_a_cancelled_scope_is_a_cancellation() -> None:
    # Without an error of the block's own, the cancellation delivered while the renewals
    # stop is the host's and goes on to its scope.
    reached_after = False
    with anyio.CancelScope() as scope:
        async with AgentSystem(store=MemoryStore()):
            scope.cancel()
        reached_after = True
    assert scope.cancelled_caught
    assert not reached_after


class CrashingRenewals(MemoryStore):
    """A store whose lease renewals fail with a bug (not a `StoreError`) after the first lease."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0

    async def acquire(
        self,
        session_id: str,
        owner: str,
        *,
        ttl: float,
        replacing: str | None = None,
        renew: bool = False,
    ) -> None:
        self.taken += 1
        if self.taken > 1:
            raise RuntimeError("renewer bug")
        await super().acquire(session_id, owner, ttl=ttl, replacing=replacing, renew=renew)


async def test_a_crash_of_the_lease_renewer_leaves_the_block_as_an_error() -> None:
    # The renewer's crash cancels the block; leaving it must raise the crash, never
    # swallow it as the block's own cancellation.
    from arkhon_rheo.testing import ReferenceState, reference_machine

    never = anyio.Event()

    async def hold(cycle: int) -> None:
        await never.wait()

    store = CrashingRenewals()
    reached_after = False

    async def run() -> None:
        nonlocal reached_after
        async with store, AgentSystem(store=store, lease_ttl=0.03) as system:
            await system.start(reference_machine(before={"think": hold}), ReferenceState())
            await anyio.sleep_forever()
        reached_after = True

    with pytest.raises(BaseException) as caught:  # noqa: PT011 - checked below
        await run()
    assert not reached_after
    error = caught.value
    crashes = error.subgroup(RuntimeError) if isinstance(error, BaseExceptionGroup) else error
    assert crashes is not None
    assert "renewer bug" in repr(crashes)


class OldLeases(MemoryStore):
    """A store written before `Store.acquire` took ``renew``: its renewals are plain takes."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0
        self.renewed = anyio.Event()

    async def acquire(  # type: ignore[override]
        self, session_id: str, owner: str, *, ttl: float, replacing: str | None = None
    ) -> None:
        await super().acquire(session_id, owner, ttl=ttl, replacing=replacing)
        self.taken += 1
        if self.taken == 3:  # the first take, then two renewals
            self.renewed.set()


async def test_a_store_whose_acquire_takes_no_renew_is_renewed_as_before() -> None:
    from arkhon_rheo.testing import ReferenceState, reference_machine

    never = anyio.Event()

    async def hold(cycle: int) -> None:
        await never.wait()

    store = OldLeases()
    async with store, AgentSystem(store=store, lease_ttl=0.06) as system:  # type: ignore[arg-type]
        handle = await system.start(reference_machine(before={"think": hold}), ReferenceState())
        await store.renewed.wait()
        assert not handle.done  # renewed, not refused
        handle.cancel()
