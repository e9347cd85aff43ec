"""Claims: one operation at a time on a session in an `AgentSystem`, its lease given up once.

A store's lease keeps a second *system* from driving a session, but a system
renews its own lease, so two calls of one system (two ``resume`` of one
session, a ``rollback`` while a ``resume`` is starting) would both get it. A
claim closes that gap: it reserves the session id in the system synchronously,
before the operation's first await, and frees it on every way out.

A claim also carries the operation's lease. Whatever happens after
`Claim.lease` was called (an error, a cancellation, even one that cut the
acquire short after the store took it), the claim gives the lease up exactly
once, shielded from cancellation, unless a launched session took it over: the
session gives it up when it ends.
"""

from __future__ import annotations

import inspect
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import LeaseLost, SessionBusy, SessionLocked, StoreError
from .._log import get_logger
from ._handle import session_of
from ._owner import is_dead

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine

    from ..protocols import Store
    from ._handle import SessionHandle
    from ._registry import Registry

__all__ = ["Claim", "Claims"]

_logger = get_logger("arkhon_rheo.system")


def _renews(store: Store | None) -> bool:
    """Whether ``store.acquire`` takes ``renew`` (see `Store.acquire`)."""
    if store is None:
        return False
    try:
        parameters = inspect.signature(store.acquire).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the protocol's
        return True
    return any(p.name == "renew" or p.kind is p.VAR_KEYWORD for p in parameters)


class Claim:
    """One operation's hold on a session: reserved in this system, perhaps leased in the store."""

    __slots__ = ("_claims", "_leased", "session_id")

    def __init__(self, claims: Claims, session_id: str) -> None:
        self._claims = claims
        self.session_id = session_id
        self._leased = False

    @property
    def owner(self) -> str:
        """The lease owner name this claim takes the lease as (its system's)."""
        return self._claims.owner

    async def lease(self) -> str | None:
        """Take the session's lease in the store for this operation.

        A lease held by a process of this host that is dead (or whose pid now
        names another process) is taken over at once instead of waiting for it
        to run out.

        Returns:
            The dead owner whose lease was taken over, if any.

        Raises:
            SessionLocked: If a live owner, or one on another host, holds it.
        """
        store = self._claims.store
        assert store is not None, "a claim takes a lease only with a store"
        owner, ttl = self._claims.owner, self._claims.ttl
        # From here the lease may be ours, even if the acquire is cut short.
        self._leased = True
        try:
            try:
                await store.acquire(self.session_id, owner, ttl=ttl)
            except SessionLocked as exc:
                if not is_dead(exc.owner):
                    raise
                await store.acquire(self.session_id, owner, ttl=ttl, replacing=exc.owner)
                return exc.owner
        except SessionLocked:
            self._leased = False  # another owner's: nothing of ours to give up
            raise
        return None

    def hand_over(self) -> None:
        """A launched session holds the lease now; it gives it up when it ends."""
        self._leased = False

    async def _give_up(self) -> None:
        if self._leased:
            self._leased = False
            store = self._claims.store
            assert store is not None
            with anyio.CancelScope(shield=True):
                await store.release(self.session_id, self._claims.owner)


class Claims:
    """The sessions a system has an operation under way on.

    Args:
        store: Where leases are taken, if the system has a store.
        owner: The system's lease owner name.
        ttl: The lease's time to live, in seconds.
    """

    __slots__ = ("_busy", "_renewal", "owner", "store", "ttl")

    def __init__(self, store: Store | None, owner: str, ttl: float) -> None:
        self.store = store
        self.owner = owner
        self.ttl = ttl
        #: Whether renewals take the lease only while held (``renew=True``): where the
        #: store's ``acquire`` takes it (a store written before it had it: a plain take).
        self._renewal = _renews(store)
        self._busy: set[str] = set()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._busy

    @asynccontextmanager
    async def renewing(
        self, registry: Registry, *also: Callable[[], Coroutine[Any, Any, None]]
    ) -> AsyncIterator[None]:
        """Renew the lease of every session running in ``registry`` while the block runs.

        Every third of the lease's time to live; a session whose lease another
        owner took is cancelled (it never writes beside that owner), and a
        transient store failure waits for the next round. Leaving the block
        stops the renewals, whatever the block raised; the tasks of ``also``
        (the system's timer watch) run beside them, and stop with them.
        """
        # The group is entered by hand so that the block's own exception passes
        # through unwrapped (trio's nurseries would group it); its exit must not
        # replace that exception either, so a failure of the exit itself (a
        # cancellation delivered there) only surfaces when the block succeeded.
        # A crash of the renewer is the exception: it cancelled the group's scope,
        # which encloses the block, so what the block raised is that cancellation,
        # and the crash (raised by the group's exit) is what must come out.
        group = anyio.create_task_group()
        await group.__aenter__()
        group.start_soon(self._renew, registry)
        for task in also:
            group.start_soon(task)
        body_failed = False
        try:
            yield
        except BaseException:
            body_failed = True
            raise
        finally:
            renewer_failed = group.cancel_scope.cancel_called  # only the renewer sets it
            group.cancel_scope.cancel()
            try:
                await group.__aexit__(None, None, None)
            except BaseException:
                if renewer_failed or not body_failed:
                    raise

    async def _renew(self, registry: Registry) -> None:
        while True:
            await anyio.sleep(self.ttl / 3)
            # All at once, so that they ride in the store's group commits together: one
            # at a time, a round of many leases on a busy store outlasts the leases.
            async with anyio.create_task_group() as group:
                for handle in registry:
                    if not handle.done:
                        group.start_soon(self._renew_one, handle)

    async def _renew_one(self, handle: SessionHandle[Any]) -> None:
        store = self.store
        assert store is not None
        session = session_of(handle)
        if session.exit_reason is not None:
            return  # ended (parked, finished): it gave its lease up, or is giving it up
        try:
            # Renewed only while this owner holds it: a lease given up (a park), or
            # taken by another owner since (this process was paused past it), is not
            # taken back: another owner may have driven the session on meanwhile.
            if self._renewal:
                await store.acquire(handle.session_id, self.owner, ttl=self.ttl, renew=True)
            else:
                await store.acquire(handle.session_id, self.owner, ttl=self.ttl)
        except (SessionLocked, LeaseLost) as exc:
            if session.exit_reason is not None:
                return  # it parked or ended meanwhile: its lease was given up
            # Another owner took over: never write beside it, not even a status. The
            # run ends as an append refused with LeaseLost ends it (LEASE_LOST).
            _logger.error(
                "session_lease_lost",
                session_id=handle.session_id,
                owner=self.owner,
                holder=exc.owner if isinstance(exc, SessionLocked) else exc.holder,
                stage="renewal",
            )
            session.lease_taken()
            handle.cancel()
        except StoreError:
            pass  # a transient store failure; the next round tries again

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[Claim]:
        """Reserve ``session_id`` for the block; on the way out, give its lease up and free it.

        The reservation is made before the first await, so of two calls racing
        for one session, the second always finds the first's.

        Raises:
            SessionBusy: If another operation of this system holds the session.
        """
        if session_id in self._busy:
            raise SessionBusy(
                f"session {session_id!r} is busy here: another call of this system is "
                "starting or changing it; wait for that call to return first",
                session_id=session_id,
            )
        self._busy.add(session_id)
        claim = Claim(self, session_id)
        try:
            yield claim
        finally:
            try:
                await claim._give_up()
            finally:
                self._busy.discard(session_id)
