"""A session's link to its store: every commit is recorded before it becomes authoritative.

Each commit's values are encoded once (`StateHasher.encode`): the digest is
chained over those bytes and a store that takes encoded patches keeps them as
they are. Snapshots are taken by cost unless a fixed interval is asked for: a
snapshot is written once the events stored since the last one weigh as much as
the state did then (in bytes of JSON, and at least `SNAPSHOT_MIN_BYTES`), so
snapshots take no more room than about twice the events, and loading a session
folds at most about a state's worth of events after its latest snapshot (or a
few dozen, for a small state), however long its history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import LeaseLost
from ..protocols._seams import StoreSupport

if TYPE_CHECKING:
    from collections.abc import Awaitable, Collection, Mapping

    from ..core import Keyring
    from ..core._seams import EventCodec
    from ..protocols import AgentState, NewMessage, Store, TransitionEvent
    from ..protocols._seams import Queued
    from ._commit_rule import StateDigest

__all__ = ["EVENT_BYTES", "SNAPSHOT_MIN_BYTES", "Mail", "Persistence", "linked"]

#: What an event costs a store besides its patch's JSON, in bytes (a compact row's
#: key, shape, times and digest), for the snapshot policy's count.
EVENT_BYTES = 40
#: The fewest bytes of events between two snapshots taken by cost: a small state
#: is not snapshotted every few events.
SNAPSHOT_MIN_BYTES = 4096


class Mail(NamedTuple):
    """What a step's commit carries to the inbox: the message it applied, the timers it set."""

    #: The inbox position of the message applied (``None``: none).
    applied: int | None
    #: The timers to post, due by the system's clock at the commit.
    posts: tuple[NewMessage, ...]
    #: What the step's event records of both (``info["message"]``, ``info["timers"]``).
    info: dict[str, Any]


def linked(event: TransitionEvent, link: Mapping[str, Any]) -> TransitionEvent:
    """``event`` with ``link`` (a child session's parent step) under ``info["parent"]``."""
    return event._replace(info={**(event.info or {}), "parent": dict(link)})


class Persistence:
    """Writes a session's events, and its snapshots when they are due, to a store.

    The supervisor awaits `record` (or, on a step's commit, what `write`
    returns, then calls `accept`) before a commit becomes authoritative, so
    what a caller was told is committed is in the store, as durable as the
    store's durability mode makes it.

    Args:
        store: The store, already entered.
        codec: Encodes the machine's states and events.
        session_id: The session.
        snapshot_every: Take a snapshot after every this many events; ``None``
            (the default) takes them by cost (see the module's doc).
        owner: Who holds the session's lease (released when the session ends).
        digest: The digest of the session's current state; each stored event
            carries the digest of the state it leads to.
        link: A child session's link to its parent step, stored in each event's
            ``info["parent"]``.
        keyring: What opens the sealed fields of the messages the session receives.
    """

    __slots__ = (
        "_direct",
        "_next",
        "_next_since",
        "_next_size",
        "_queue",
        "_since",
        "_size",
        "_support",
        "_written",
        "codec",
        "digest",
        "keyring",
        "link",
        "lost",
        "owner",
        "session_id",
        "snapshot_every",
        "store",
    )

    def __init__(
        self,
        store: Store,
        codec: EventCodec,
        session_id: str,
        *,
        snapshot_every: int | None = None,
        owner: str | None = None,
        digest: StateDigest,
        link: Mapping[str, Any] | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self.link = link
        self.keyring = keyring
        self.store = store
        self.digest = digest
        self.owner = owner
        #: Another owner took the lease (`LeaseLost`): nothing more is written.
        self.lost = False
        self.codec = codec
        self.session_id = session_id
        self.snapshot_every = snapshot_every
        #: Whether the store takes encoded patches and snapshots (JSON bytes) as they are.
        self._support = support = StoreSupport(store)
        self._direct = support.encoded
        #: The store's append without a coroutine of its own, if it has one.
        self._queue = support.queue
        #: The write `write` queued that way, until `accept` (or `abandon`) reads it.
        self._written: Queued | None = None
        #: Bytes of the events stored since the last snapshot, and the state's size
        #: then (``None``: not known yet, until this run's first commit).
        self._since = 0
        self._size: int | None = None
        #: What `accept` moves on to once the event `write` handed over is stored.
        self._next: StateDigest | None = None
        self._next_since = 0
        self._next_size: int | None = None

    async def record(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str | None = None,
        waiting: Any = None,
        accepts: Collection[str] = (),
        mail: Mail | None = None,
    ) -> None:
        """Store ``event`` (and ``state`` as a snapshot when one is due): `write`, then `accept`.

        With ``waiting`` (and ``status``), the same write parks the session: its
        record says what it waits for (message kinds ``accepts``) and its owner's
        lease is given up (see `Store.append`); a store whose ``append`` takes no
        ``waiting`` parks it in a second write (`Store.park`).

        Raises:
            UnserializablePatch: If the event cannot be encoded (nothing was written).
            StoreError: If the store refused or failed.
        """
        split = waiting is not None and not self._support.parks
        try:
            parked = (None, ()) if split else (waiting, accepts)
            await self.write(event, state, status=status, mail=mail, parked=parked)
        except BaseException:
            self.abandon()
            raise
        self.accept()
        if split:  # a store whose append cannot park: a second write
            await self.store.park(
                self.session_id,
                self.owner,
                status=status or "waiting",
                waiting=waiting,
                accepts=accepts,
                now=event.finished_at,
            )

    def write(
        self,
        event: TransitionEvent,
        state: AgentState,
        *,
        status: str | None = None,
        mail: Mail | None = None,
        parked: tuple[Any, Collection[str]] = (None, ()),
    ) -> Awaitable[object]:
        """Encode ``event`` and hand it to the store; return the store's write to await.

        Once the returned awaitable has returned, call `accept` (which raises the
        store's refusal, if any); if either raises, the digest and the snapshot
        policy stay where they were. If the wait is interrupted (cancelled), call
        `abandon`. The supervisor's step awaits the store's write itself this
        way, with no coroutine of this class alive (and walked by the cyclic GC)
        while it waits, nor of the store's where it queues writes directly
        (`StoreSupport.queue`: then the awaitable is its batch's own signal).

        ``mail`` is the inbox message the step applied and the timers it set: the
        store records both in the transaction that stores the event. ``parked``:
        what the session waits for once the event is stored, and the message
        kinds it accepts (see `record`); ``(None, ())``: it does not park.

        Raises:
            UnserializablePatch: If the event cannot be encoded (nothing was written).
        """
        if self.link is not None:
            event = linked(event, self.link)
        encoded = self.digest.hasher.encode(event.patch, stage=event.stage)
        digest = self.digest.after(event, state, encoded)
        since = self._since + encoded.size + EVENT_BYTES
        size = self._size
        state_json = None
        if self.snapshot_every is not None:
            due = event.seq % self.snapshot_every == 0
        elif size is None:
            # This run's first commit: measure the state. A resumed session may have
            # events after its latest snapshot that this run does not know of: it
            # takes one now, so a session resumed again and again stays bounded.
            state_json = self.codec.state_json(state)
            size = len(state_json)
            due = event.seq > 1
        else:
            due = since >= max(size, SNAPSHOT_MIN_BYTES)
        snapshot = None
        if due:
            if state_json is None:
                state_json = self.codec.state_json(state)
            size, since = len(state_json), 0
            snapshot = (
                event.seq,
                state_json if self._direct else self.codec.encode_state(state),
            )
        # The event that ends the session carries its status in the same
        # transaction: a crash right after it cannot leave it "running".
        machine = self.codec.machine
        if machine.is_terminal(event.to_state):
            status = "failed" if event.to_state is machine.failed else "finished"
        patch = encoded if self._direct else encoded.data()
        self._next, self._next_since, self._next_size = digest, since, size
        # The store may drop the encoded event (and its patch) once it has its
        # rows, rather than hold it until the write is durable.
        events = [self.codec.encode_event(event, digest.value, patch=patch)]
        if parked[0] is not None:
            return self._park(events, snapshot, status, mail, parked)
        return self._append(events, snapshot, status, mail)

    def _park(
        self,
        events: list[Any],
        snapshot: Any,
        status: str | None,
        mail: Mail | None,
        parked: tuple[Any, Collection[str]],
    ) -> Awaitable[object]:
        """The store's append of ``events`` that parks the session in the same transaction."""
        options: dict[str, Any] = {"waiting": parked[0], "accepts": parked[1]}
        if self.owner is not None:
            options["owner"] = self.owner
        if mail is not None:
            options.update(applied=mail.applied, posts=mail.posts)
        return self.store.append(
            self.session_id, events, snapshot=snapshot, status=status, **options
        )

    def _append(
        self, events: list[Any], snapshot: Any, status: str | None, mail: Mail | None
    ) -> Awaitable[object]:
        """The store's append of ``events``; it names the lease's owner (fencing: `LeaseLost`)."""
        store, sid, owner = self.store, self.session_id, self.owner
        if (queue := self._queue) is not None:
            applied, posts = (None, ()) if mail is None else (mail.applied, mail.posts)
            if (queued := queue(sid, events, snapshot, status, applied, posts, owner)) is not None:
                self._written, wait = queued
                return wait
        if mail is None:
            if owner is None:
                return store.append(sid, events, snapshot=snapshot, status=status)
            return store.append(sid, events, snapshot=snapshot, status=status, owner=owner)
        if owner is None:
            return store.append(
                sid,
                events,
                snapshot=snapshot,
                status=status,
                applied=mail.applied,
                posts=mail.posts,
            )
        return store.append(
            sid,
            events,
            snapshot=snapshot,
            status=status,
            applied=mail.applied,
            posts=mail.posts,
            owner=owner,
        )

    def accept(self) -> None:
        """The event `write` handed over is stored: move the digest and the snapshot count on.

        Raises:
            StoreError: The store refused the write (`write` queued it with no
                coroutine of the store's: its refusal is raised here); nothing moves on.
        """
        digest = self._next
        if digest is None:  # a bug of the caller's: never move on to a stale digest
            raise RuntimeError("Persistence.accept() without a write() before it")
        if (written := self._written) is not None:
            self._written = None
            if written.error is not None:  # refused: nothing moves on
                raise written.error
        self._next = None
        self.digest.accept(digest)
        self._since, self._size = self._next_since, self._next_size

    def abandon(self) -> None:
        """The wait for the event `write` handed over was interrupted: nobody reads its outcome.

        The write is committed all the same, or its refusal logged by the store.
        """
        if (written := self._written) is not None:
            self._written = None
            written.abandoned = True

    async def close(self, status: str | None) -> None:
        """The run has ended: store its ``status`` (unless ``None``) and give its lease up.

        Nothing at all once the lease was lost to another owner (`lost`). The
        status is fenced by the lease (`Store.set_status` with the owner): a run
        paused past its lease while another owner took the session on stores
        nothing over that owner's status.

        Raises:
            LeaseLost: If another owner took the lease meanwhile: nothing is
                written, and ``lost`` is set (the lease is not ours to give up).
            StoreError: If the store failed; the lease is given up all the same.
        """
        if self.lost:  # the session is another owner's now: not ours to write
            return
        owner = self.owner
        try:
            if status is not None and owner is None:
                await self.store.set_status(self.session_id, status)
            elif status is not None:
                await self.store.set_status(self.session_id, status, owner=owner)
        except LeaseLost:
            self.lost = True
            raise
        finally:
            if owner is not None and not self.lost:
                await self.store.release(self.session_id, owner)
