"""`Worker`: drives the sessions a shared store has something to do for.

A worker is an `AgentSystem` with a loop in front: it claims (see
`arkhon_rheo.protocols.WorkQueue`) up to as many sessions of its machines as
it has room for, drives each with the system's own machinery (a running one
is resumed from its last commit, as `resume` does; a parked one whose message
or timer is due is woken, as `send` does), and waits for more work: a write of
this process, a timer of a parked session falling due, a run ending, or the
poll interval, for other processes' writes.

Draining (`Worker.drain`, or SIGTERM to ``arkhon-rheo worker``) stops the
claims and hands every run over at its next commit boundary: the step under
way finishes and commits, then the run stops with the session's record left
``"running"`` and its lease given up, so another worker claims it and goes on
from that commit; nothing committed runs again. A worker that dies instead
leaves its leases to run out; then other workers claim its sessions.

A worker cancelled (``with anyio.move_on_after(...): await worker.run()``, or its
task group taken down by a run's ``BaseException``) hands over too, at once: the
steps under way stop uncommitted, each session's record stays ``"running"`` at
its last commit and its lease is given up, so another worker claims it and runs
that step again; no session is ever stored ``"cancelled"`` by a worker.

A session whose step kills the process running it (``os._exit``, a signal, the
memory killer) would be claimed and lost again after every lease, forever: a
worker counts the claims since the session's last commit (the ``RESUME`` events
its claims record) and, past ``max_claims_without_progress``, fails the session
(a ``FAILURE`` event, error type ``PoisonSession``) instead of running it again.
"""

from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .._errors import ArkhonError, ConfigurationError, PoisonSession, StoreError, StoreUnavailable
from .._log import get_logger
from .._redact import scrub
from ..protocols import Machine, WorkQueue
from ._children import tell_parked_parents
from ._options import check_positive
from ._record import session_of
from ._system import AgentSystem

if TYPE_CHECKING:
    from collections.abc import Iterable

    from anyio.abc import TaskGroup

    from ..core import Keyring
    from ..protocols import Clock, SessionRecord, Store
    from ._record import EventListener, SessionHandle

__all__ = ["Worker"]

_logger = get_logger("arkhon_rheo.worker")


class _Kick:
    """A flag with an event: set by a run ending or a drain; the idle wait returns."""

    __slots__ = ("_event", "_ready")

    def __init__(self) -> None:
        self._ready = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        self._ready = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if not self._ready:
            self._event = anyio.Event()
            await self._event.wait()
        self._ready = False
        self._event = None


def _described(place: int, machine: Machine[Any]) -> str:
    """Machine number ``place`` (from 1) of a worker's, as its refusal shows it."""
    model = machine.resources.get("model")
    what = f"#{place} {machine!r} on {machine.state_type.__qualname__}"
    return scrub(f"{what}, model {model!r}") if model is not None else what


def _machines(machines: Iterable[Machine[Any]]) -> dict[str, Machine[Any]]:
    found: dict[str, tuple[int, Machine[Any]]] = {}
    for place, machine in enumerate(machines, start=1):
        if not isinstance(machine, Machine):
            raise ConfigurationError(f"a worker drives Machine objects, got {machine!r}")
        first, other = found.setdefault(machine.name, (place, machine))
        if other is not machine:
            raise ConfigurationError(
                f"two machines are named {machine.name!r} ({_described(first, other)}; "
                f"{_described(place, machine)}): a worker tells sessions' machines apart by "
                "name, so give each its own: pass name=... to react_agent for an agent it "
                "makes (every one is named 'react-agent' unless told), or to Machine; "
                "for instance react_agent(model, tools, name='triage')"
            )
    if not found:
        raise ConfigurationError("a worker needs at least one machine to drive")
    return {name: machine for name, (_, machine) in found.items()}


class Worker:
    """Drives the sessions of ``machines`` that ``store`` has something to do for.

    Run it with ``await worker.run()`` (it returns once drained); as many
    workers as you like, in as many processes (and, with a store made for it,
    on as many machines) share one store, and never drive one session at once.
    A service stores sessions and messages for them with `AgentSystem.submit`
    and ``AgentSystem.send(..., drive=False)``, and reads results, events and
    replies through ``system.stored(machine, id)``.

    Args:
        store: The shared store: an entered `Store` that is also a
            `arkhon_rheo.protocols.WorkQueue` (`SQLiteStore`, `PostgresStore`,
            `MemoryStore`). It is
            yours: enter it before ``run`` and leave it after.
        machines: The machines whose sessions it drives (by name).
        concurrency: The most sessions it drives at once.
        lease_ttl: Each session's lease, renewed every third of it; a worker that
            dies leaves its sessions to others once their leases run out.
        poll_interval: The longest it waits before looking in the store again
            (other processes' writes), in seconds.
        drain_timeout: How long a drain lets the steps under way run before it
            cancels them (they run again elsewhere, from their last commit); ``None``:
            as long as they take.
        clock: What messages and timers are timed by (see `AgentSystem`).
        max_steps: The step budget of each run.
        listeners: Called with every committed event of the sessions it drives.
        secrets: The keyring of sessions with `Sensitive` fields.
        seed: Seeds each run's RNG, for exact tests.
        max_claims_without_progress: A session stored "running" that has been
            claimed this many times since its last commit (each claim's run lost
            with its process, say) is failed at its next claim instead of run
            again: its record ends ``"failed"`` with a `FailureRecord` of error
            type ``PoisonSession`` naming the count and the stage in flight (fork
            it or roll it back to go on). ``None``: claimed again forever.

    Raises:
        ConfigurationError: If the store is not a work queue, a machine is not
            a `Machine` (or two share a name), or a bound is out of range.
    """

    def __init__(
        self,
        store: Store,
        machines: Iterable[Machine[Any]],
        *,
        concurrency: int = 16,
        lease_ttl: float = 30.0,
        poll_interval: float = 1.0,
        drain_timeout: float | None = None,
        clock: Clock | None = None,
        max_steps: int = 100,
        listeners: Iterable[EventListener] = (),
        secrets: Keyring | None = None,
        seed: int | None = None,
        max_claims_without_progress: int | None = 5,
    ) -> None:
        if not isinstance(store, WorkQueue):
            raise ConfigurationError(
                "a worker claims sessions from a store that is a WorkQueue (SQLiteStore, "
                f"PostgresStore, MemoryStore), got {type(store).__name__}"
            )
        check_positive("concurrency", concurrency, integer=True)
        check_positive("poll_interval", poll_interval)
        if drain_timeout is not None:
            check_positive("drain_timeout", drain_timeout)
        if max_claims_without_progress is not None:
            check_positive("max_claims_without_progress", max_claims_without_progress, integer=True)
        self._machines = _machines(machines)
        self._queue: WorkQueue = store
        self._concurrency = concurrency
        self._poll = poll_interval
        self._drain_timeout = math.inf if drain_timeout is None else drain_timeout
        self._system = AgentSystem(
            store=store,
            path=None,
            lease_ttl=lease_ttl,
            clock=clock,
            max_steps=max_steps,
            listeners=listeners,
            secrets=secrets,
            seed=seed,
            poll_interval=poll_interval,
        )
        # Cancelled (the worker's run, or a run's BaseException taking the others
        # down), a run is handed over at its last commit, never ended "cancelled".
        self._system._host.hand_over_on_cancel = True
        self._system._host.poison_after = max_claims_without_progress
        self._running: dict[str, SessionHandle[Any]] = {}
        #: Claimed sessions whose runs are being started; set when the last one is.
        self._starting: set[str] = set()
        self._settled: anyio.Event | None = None
        self._kick = _Kick()
        self._draining = False
        self._started = False
        #: Runs started, and claims that found something, since it started.
        self.driven = 0

    @property
    def owner(self) -> str:
        """The name its leases carry (host, process, a token)."""
        return self._system._claims.owner

    @property
    def running(self) -> int:
        """How many sessions it drives now."""
        return len(self._running)

    def drain(self) -> None:
        """Stop claiming, hand every run over at its next commit boundary, and let `run` return.

        Safe to call from a signal handler's task, more than once, or before `run`.
        """
        self._draining = True
        # The runs known now stop at their next commit boundary from here on, not
        # from when the serving loop next looks (it may be in a store round trip).
        for handle in self._running.values():
            session_of(handle).handoff = True
        self._kick.set()

    async def run(self) -> None:
        """Claim and drive sessions until drained (see `drain`).

        Raises:
            ConfigurationError: If called twice.
            StoreError: If the store fails on a claim (the runs are handed over first);
                a dropped connection (`StoreUnavailable`) is not that: the claim is
                made again a poll interval later.
        """
        if self._started:
            raise ConfigurationError("a worker runs once; make a new one to run again")
        self._started = True
        async with self._system, anyio.create_task_group() as group:
            try:
                await self._tell_parents(group)
                await self._serve(group)
            finally:
                # Drained: the steps under way finish first; otherwise (cancelled,
                # a store failure) they stop now, and run again elsewhere.
                with anyio.CancelScope(shield=True):
                    await self._hand_over(self._drain_timeout if self._draining else 0.0)

    async def _tell_parents(self, group: TaskGroup) -> None:
        """Post the ends of children a dead process did not post to their parked parents.

        And drive the parents parked on a child whose run was cut before it ended
        (nothing else would wake them): each is woken as a claim of it would be;
        its step resumes the child.
        """
        try:
            cut = await tell_parked_parents(self._system._host, self._machines.values())
        except StoreError as exc:  # the parents stay parked: `recover` posts them too
            _logger.warning("parents_not_told", owner=self.owner, error=str(exc))
            return
        for record in cut:
            self._starting.add(record.session_id)
            group.start_soon(self._start, record, group)

    async def _serve(self, group: TaskGroup) -> None:
        clock = self._system._host.clock
        names = tuple(self._machines)
        ttl = self._system._claims.ttl
        while not self._draining:
            room = self._concurrency - len(self._running) - len(self._starting)
            now = clock.now()
            if room > 0:
                try:
                    claimed = await self._claim(names, room, ttl, now)
                except StoreUnavailable as exc:  # dropped: the next claim reconnects
                    _logger.warning("claim_failed", owner=self.owner, error=str(exc))
                    await anyio.sleep(self._poll)
                    continue
                # Started side by side: their loads and first commits share the
                # store's round trips (one at a time, a claim of many waits on each).
                for record in claimed:
                    self._supersede(record.session_id)
                    self._starting.add(record.session_id)
                    group.start_soon(self._start, record, group)
                if claimed and len(claimed) == room:
                    continue  # there may be more: look again once there is room
            await self._idle(now)

    async def _claim(
        self, names: tuple[str, ...], room: int, ttl: float, now: float
    ) -> list[SessionRecord]:
        """Claim up to ``room`` sessions; if cancelled meanwhile, give what it took back.

        A claim cut by cancellation while its write was under way may still land
        (a store that commits in a writer of its own goes on with it): its leases
        would then be held, under this worker's name, by no run until they ran
        out. So the claim is waited for, shielded (for at most a lease's time),
        and, the worker cancelled meanwhile, every session it took is released
        before the cancellation goes on.
        """
        claimed: list[SessionRecord] = []
        with anyio.move_on_after(ttl, shield=True):
            claimed = list(
                await self._queue.claim(self.owner, machines=names, limit=room, ttl=ttl, now=now)
            )
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            store = self._system.store
            assert store is not None  # a worker's system runs on the store it claims from
            with anyio.move_on_after(ttl, shield=True):
                for record in claimed:
                    with contextlib.suppress(StoreError):  # it runs out with its lease
                        await store.release(record.session_id, self.owner)
            raise
        return claimed

    def _supersede(self, session_id: str) -> None:
        """Stop a run here of a session just claimed: its lease lapsed, and is the claim's now.

        The claim found the session's lease free (given up by a park, or run out
        while this process was paused), and took it under this worker's name: the
        run still going here must write nothing more (another owner may have driven
        the session on meanwhile, and its writes would carry the new lease), nor
        give the claim's lease up. Called at once after the claim returns, before
        anything else of this process runs; the new run starts once it has ended.
        """
        live = self._system._host.running(session_id)
        if live is not None:
            session = session_of(live)
            if session.exit_reason is None:
                _logger.warning("session_lease_lapsed", session_id=session_id, owner=self.owner)
            session.lease_taken()
            live.cancel()

    async def _start(self, record: SessionRecord, group: TaskGroup) -> None:
        try:
            await self._drive(record, group)
        finally:
            self._starting.discard(record.session_id)
            if record.session_id not in self._running:
                self._kick.set()  # its room is free again
            if not self._starting and self._settled is not None:
                self._settled.set()

    async def _drive(self, record: SessionRecord, group: TaskGroup) -> None:
        """Drive claimed session ``record`` here; give its lease up if it has nothing to run."""
        system = self._system
        machine = self._machines[record.machine]
        session_id = record.session_id
        superseded = system._host.running(session_id)
        if superseded is not None:  # see `_supersede`: it ends first
            await session_of(superseded).done.wait()
        try:
            if record.status == "waiting":
                handle = await system._postman.wake(machine, session_id)
            else:
                handle = await system.stored(machine, session_id).resume()
        except PoisonSession as exc:  # failed instead of run again: nothing to hold
            _logger.warning("session_poisoned", session_id=session_id, error=str(exc))
            return
        except ArkhonError as exc:
            # A record that does not fit this machine, say: it stays leased here (the
            # failed call gave its lease up) until that runs out, so it is tried again
            # (here or elsewhere) a lease later, not in a loop.
            _logger.warning("session_not_driven", session_id=session_id, error=repr(exc))
            await self._hold(session_id)
            return
        if handle is None or handle.done:  # not waiting any more, or over already
            await self._release(session_id)
            return
        self.driven += 1
        self._running[session_id] = handle
        group.start_soon(self._follow, handle)

    async def _hold(self, session_id: str) -> None:
        store = self._system.store
        assert store is not None
        with contextlib.suppress(StoreError):  # taken meanwhile, or the store failed
            await store.acquire(session_id, self.owner, ttl=self._system._claims.ttl)

    async def _release(self, session_id: str) -> None:
        store = self._system.store
        assert store is not None
        try:
            await store.release(session_id, self.owner)
        except StoreError as exc:  # it runs out by itself
            _logger.warning("lease_not_released", session_id=session_id, error=repr(exc))

    async def _follow(self, handle: SessionHandle[Any]) -> None:
        try:
            await session_of(handle).done.wait()
        finally:
            if self._running.get(handle.session_id) is handle:  # not a run after it
                del self._running[handle.session_id]
            self._kick.set()

    async def _idle(self, claimed_at: float) -> None:
        """Wait for work: a write, a timer due, a run ending, a drain, or the poll.

        The next timer is the first one after ``claimed_at``, the time the last
        claim looked at: one that fell due since (the clock moved on) wakes it at once.
        """
        clock = self._system._host.clock
        store = self._system.store
        assert store is not None
        try:
            _, next_at = await store.waking(claimed_at)
        except StoreUnavailable:  # dropped: the poll looks again
            next_at = None
        async with anyio.create_task_group() as group:

            async def first(waiting: Any) -> None:
                await waiting
                group.cancel_scope.cancel()

            group.start_soon(first, self._queue.wait_for_work(self._poll))
            group.start_soon(first, self._kick.wait())
            if next_at is not None:
                group.start_soon(first, clock.sleep_until(next_at))

    async def _hand_over(self, grace: float) -> None:
        """Hand every run over at its next commit boundary; cancel what outlasts ``grace``."""
        while self._starting:  # the runs being started first: then every run is known
            self._settled = anyio.Event()
            await self._settled.wait()
        handles = list(self._running.values())
        for handle in handles:
            session_of(handle).handoff = True
        with anyio.move_on_after(grace):
            for handle in handles:
                await session_of(handle).done.wait()
        for handle in handles:
            handle.cancel()  # handed over all the same: its record stays "running"
        for handle in handles:
            await session_of(handle).done.wait()
