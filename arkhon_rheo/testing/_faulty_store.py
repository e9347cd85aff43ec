"""`FaultyStore`: a `Store` that fails the calls you name and hands the rest to a real one.

`FaultPlan.store()` injects faults through the stores' own write seam, by
session and at a seeded rate; a `FaultyStore` is the plainer double, for a test
that wants one exact call of any operation to fail: the third ``append``, every
``load``, the ``set_status`` of one session, an ``acquire``. It wraps any
`Store`, so the code under test runs against the real thing (``MemoryStore`` or
``SQLiteStore``) except for the calls it fails. A failed call raises before it
reaches the wrapped store, as a refused write does: nothing of it is stored.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.lowlevel

from .._errors import ConfigurationError, StoreError
from ..protocols import Store
from ..protocols._seams import StoreSupport

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence
    from types import TracebackType

    from ..protocols import (
        LeaseRecord,
        LoadedSession,
        NewMessage,
        SessionRecord,
        StoredEffect,
        StoredEvent,
        StoredMessage,
        StoreStatistics,
    )

__all__ = ["FaultyStore", "StoreCall"]

#: The `Store` operations a `FaultyStore` can fail.
OPERATIONS = (
    "create_session",
    "append",
    "record",
    "load",
    "history",
    "snapshot_at",
    "sessions",
    "set_status",
    "acquire",
    "leases",
    "release",
    "post",
    "pending",
    "messages",
    "park",
    "waking",
    "begin_effect",
    "finish_effect",
    "effects",
)


@dataclass(frozen=True, slots=True)
class StoreCall:
    """One call a `FaultyStore` received, as a rule's predicate sees it.

    Attributes:
        operation: The `Store` method called (``"append"``, ``"load"``...).
        index: Which call of that operation it is on this store, from 1
            (failed calls count too).
        session_id: The session it is about; ``None`` for ``sessions``, ``leases``
            and ``waking``.
    """

    operation: str
    index: int
    session_id: str | None


@dataclass(frozen=True, slots=True)
class _Rule:
    operation: str
    nth: frozenset[int] | None
    when: Callable[[StoreCall], bool] | None
    error: Callable[[], BaseException] | None

    def matches(self, call: StoreCall) -> bool:
        if call.operation != self.operation:
            return False
        if self.nth is not None and call.index not in self.nth:
            return False
        return self.when is None or bool(self.when(call))


class FaultyStore:
    """A `Store` that delegates to ``inner`` and fails the calls its rules name.

    ::

        store = FaultyStore(MemoryStore())
        store.fail("append", nth=3)  # the third append raises StoreError
        store.fail("load", error=lambda: StoreError("disk I/O error"))  # every load
        async with store, AgentSystem(store=store) as system:
            result = await system.run(machine, state)
        assert store.failed == [StoreCall("append", 3, result.session_id)]

    Entering it enters ``inner``, and leaving it leaves ``inner``. Each call is
    counted per operation (`calls`); when a rule matches, the call raises
    before ``inner`` sees it, and is listed in `failed`.

    Args:
        inner: The store that serves every call no rule fails.

    Attributes:
        inner: The wrapped store.
        calls: How many calls of each operation the store received.
        failed: The calls it failed, in order.

    Raises:
        ConfigurationError: If ``inner`` is not a `Store`.
    """

    def __init__(self, inner: Store) -> None:
        if not isinstance(inner, Store):
            raise ConfigurationError(f"FaultyStore wraps a Store, got {inner!r}")
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.failed: list[StoreCall] = []
        self._rules: list[_Rule] = []

    def __repr__(self) -> str:
        rules = [rule.operation for rule in self._rules]
        return f"FaultyStore({self.inner!r}, failing {rules}, {len(self.failed)} failed)"

    @property
    def takes_encoded(self) -> bool:
        """Whether ``inner`` takes pre-encoded patches: sessions write through as to ``inner``."""
        return StoreSupport(self.inner).encoded

    def fail(
        self,
        operation: str,
        *,
        nth: int | Iterable[int] | None = None,
        when: Callable[[StoreCall], bool] | None = None,
        error: Callable[[], BaseException] | None = None,
    ) -> FaultyStore:
        """Fail calls of ``operation``: those given by ``nth`` and ``when``, or all of them.

        A call fails when it meets every condition given (none given: every
        call of the operation). The first matching rule decides the error.

        Args:
            operation: A `Store` method: ``"create_session"``, ``"append"``,
                ``"record"``, ``"load"``, ``"history"``, ``"snapshot_at"``,
                ``"sessions"``, ``"set_status"``, ``"acquire"``, ``"leases"``,
                ``"release"``, ``"post"``, ``"pending"``, ``"messages"``, ``"park"``,
                ``"waking"``, ``"begin_effect"``, ``"finish_effect"`` or ``"effects"``.
            nth: The call index (from 1, per operation) or indices to fail.
            when: A predicate over the `StoreCall`.
            error: Builds the exception to raise (a class or a lambda: a fresh
                one per call); by default a `StoreError` naming the call.

        Returns:
            The store, to chain calls.

        Raises:
            ConfigurationError: If the operation is unknown, ``nth`` is not call
                indices from 1, or ``when`` or ``error`` is not callable.
        """
        if operation not in OPERATIONS:
            raise ConfigurationError(
                f"a Store has no operation {operation!r}; fail one of {', '.join(OPERATIONS)}"
            )
        indices: frozenset[int] | None = None
        if nth is not None:
            indices = frozenset((nth,) if isinstance(nth, int) else nth)
            if not indices or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in indices
            ):
                raise ConfigurationError(
                    f"nth must be a call index from 1, or several, got {nth!r}"
                )
        if when is not None and not callable(when):
            raise ConfigurationError(f"when must be a predicate over a StoreCall, got {when!r}")
        if error is not None and not callable(error):
            raise ConfigurationError(
                f"error builds the exception to raise (a class or a lambda), got {error!r}"
            )
        self._rules.append(_Rule(operation, indices, when, error))
        return self

    def heal(self) -> None:
        """Drop every rule: from now on each call reaches ``inner`` (counts are kept)."""
        self._rules.clear()

    async def _check(self, operation: str, session_id: str | None) -> None:
        self.calls[operation] += 1
        if not self._rules:
            return
        call = StoreCall(operation, self.calls[operation], session_id)
        for rule in self._rules:
            if rule.matches(call):
                self.failed.append(call)
                await anyio.lowlevel.checkpoint()  # a failing call checkpoints, as a store's does
                if rule.error is not None:
                    raise rule.error()
                where = "" if session_id is None else f" of session {session_id!r}"
                raise StoreError(
                    f"{operation} call {call.index}{where} failed (injected by FaultyStore)",
                    location=str(getattr(self.inner, "location", "")),
                )

    # -- the Store protocol --------------------------------------------------------

    async def __aenter__(self) -> FaultyStore:
        """Enter ``inner``."""
        await self.inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leave ``inner``."""
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
        """`Store.create_session`, unless a rule fails it."""
        await self._check("create_session", session_id)
        return await self.inner.create_session(
            session_id,
            machine=machine,
            snapshot=snapshot,
            parent=parent,
            status=status,
            fingerprint=fingerprint,
        )

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
        """`Store.append`, unless a rule fails it (then nothing of it is stored)."""
        await self._check("append", session_id)
        await self.inner.append(
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

    async def record(self, session_id: str) -> SessionRecord:
        """`Store.record`, unless a rule fails it."""
        await self._check("record", session_id)
        return await self.inner.record(session_id)

    async def load(self, session_id: str) -> LoadedSession:
        """`Store.load`, unless a rule fails it."""
        await self._check("load", session_id)
        return await self.inner.load(session_id)

    async def history(self, session_id: str) -> tuple[StoredEvent, ...]:
        """`Store.history`, unless a rule fails it."""
        await self._check("history", session_id)
        return await self.inner.history(session_id)

    async def snapshot_at(self, session_id: str, seq: int) -> tuple[int, Any]:
        """`Store.snapshot_at`, unless a rule fails it."""
        await self._check("snapshot_at", session_id)
        return await self.inner.snapshot_at(session_id, seq)

    async def sessions(self) -> tuple[SessionRecord, ...]:
        """`Store.sessions`, unless a rule fails it."""
        await self._check("sessions", None)
        return await self.inner.sessions()

    async def set_status(self, session_id: str, status: str, *, owner: str | None = None) -> None:
        """`Store.set_status`, unless a rule fails it."""
        await self._check("set_status", session_id)
        if owner is None:
            await self.inner.set_status(session_id, status)
        else:
            await self.inner.set_status(session_id, status, owner=owner)

    async def acquire(
        self,
        session_id: str,
        owner: str,
        *,
        ttl: float,
        replacing: str | None = None,
        renew: bool = False,
    ) -> None:
        """`Store.acquire`, unless a rule fails it."""
        await self._check("acquire", session_id)
        await self.inner.acquire(session_id, owner, ttl=ttl, replacing=replacing, renew=renew)

    async def leases(self) -> tuple[LeaseRecord, ...]:
        """`Store.leases`, unless a rule fails it."""
        await self._check("leases", None)
        return await self.inner.leases()

    async def release(self, session_id: str, owner: str) -> None:
        """`Store.release`, unless a rule fails it."""
        await self._check("release", session_id)
        await self.inner.release(session_id, owner)

    async def post(
        self, session_id: str, message: NewMessage, *, capacity: int
    ) -> tuple[StoredMessage, bool]:
        """`Store.post`, unless a rule fails it (then nothing of it is stored)."""
        await self._check("post", session_id)
        return await self.inner.post(session_id, message, capacity=capacity)

    async def pending(self, session_id: str) -> tuple[StoredMessage, ...]:
        """`Store.pending`, unless a rule fails it."""
        await self._check("pending", session_id)
        return await self.inner.pending(session_id)

    async def messages(self, session_id: str) -> tuple[StoredMessage, ...]:
        """`Store.messages`, unless a rule fails it."""
        await self._check("messages", session_id)
        return await self.inner.messages(session_id)

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
        """`Store.park`, unless a rule fails it (then nothing changes)."""
        await self._check("park", session_id)
        return await self.inner.park(
            session_id, owner, status=status, waiting=waiting, accepts=accepts, now=now
        )

    async def waking(self, now: float) -> tuple[tuple[SessionRecord, ...], float | None]:
        """`Store.waking`, unless a rule fails it."""
        await self._check("waking", None)
        return await self.inner.waking(now)

    async def begin_effect(
        self,
        session_id: str,
        key: str,
        *,
        tool: str,
        arguments: Any,
        retry: bool = False,
    ) -> tuple[StoredEffect, bool]:
        """`Store.begin_effect`, unless a rule fails it (then no intent is stored)."""
        await self._check("begin_effect", session_id)
        return await self.inner.begin_effect(
            session_id, key, tool=tool, arguments=arguments, retry=retry
        )

    async def finish_effect(
        self, session_id: str, key: str, *, result: Any = None, error: str | None = None
    ) -> StoredEffect:
        """`Store.finish_effect`, unless a rule fails it (then the effect stays started)."""
        await self._check("finish_effect", session_id)
        return await self.inner.finish_effect(session_id, key, result=result, error=error)

    async def effects(self, session_id: str) -> tuple[StoredEffect, ...]:
        """`Store.effects`, unless a rule fails it."""
        await self._check("effects", session_id)
        return await self.inner.effects(session_id)

    def statistics(self) -> StoreStatistics:
        """``inner``'s statistics (the failed calls never reached it)."""
        return self.inner.statistics()
