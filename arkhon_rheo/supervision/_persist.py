"""A session's link to its store: every commit is recorded before it becomes authoritative."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..protocols import AgentState, Store, TransitionEvent
    from ._codec import EventCodec
    from ._digest import StateDigest

__all__ = ["Persistence", "linked"]


def linked(event: TransitionEvent, link: Mapping[str, Any]) -> TransitionEvent:
    """``event`` with ``link`` (a child session's parent step) under ``info["parent"]``."""
    return event._replace(info={**(event.info or {}), "parent": dict(link)})


class Persistence:
    """Writes a session's events (and a snapshot every ``snapshot_every``) to a store.

    The supervisor awaits `record` before a commit becomes authoritative, so
    what a caller was told is committed is in the store, as durable as the
    store's durability mode makes it.

    Args:
        store: The store, already entered.
        codec: Encodes the machine's states and events.
        session_id: The session.
        snapshot_every: Take a snapshot after every this many events.
        owner: Who holds the session's lease (released when the session ends).
        digest: The digest of the session's current state; each stored event
            carries the digest of the state it leads to.
        link: A child session's link to its parent step, stored in each event's
            ``info["parent"]``.
    """

    __slots__ = ("codec", "digest", "link", "owner", "session_id", "snapshot_every", "store")

    def __init__(
        self,
        store: Store,
        codec: EventCodec,
        session_id: str,
        *,
        snapshot_every: int,
        owner: str | None = None,
        digest: StateDigest,
        link: Mapping[str, Any] | None = None,
    ) -> None:
        self.link = link
        self.store = store
        self.digest = digest
        self.owner = owner
        self.codec = codec
        self.session_id = session_id
        self.snapshot_every = snapshot_every

    async def record(
        self, event: TransitionEvent, state: AgentState, *, status: str | None = None
    ) -> None:
        """Store ``event`` (and ``state`` as a snapshot when one is due).

        Raises:
            UnserializablePatch: If the event cannot be encoded (nothing was written).
            StoreError: If the store refused or failed.
        """
        if self.link is not None:
            event = linked(event, self.link)
        try:
            digest = self.digest.after(event, state)
        except Exception:
            self.codec.encode_event(event)  # names what cannot be stored, if that is it
            raise
        snapshot = None
        if event.seq % self.snapshot_every == 0:
            snapshot = (event.seq, self.codec.encode_state(state))
        # The event that ends the session carries its status in the same
        # transaction: a crash right after it cannot leave it "running".
        machine = self.codec.machine
        if machine.is_terminal(event.to_state):
            status = "failed" if event.to_state is machine.failed else "finished"
        # No local keeps the encoded event: the store may drop it (and its patch)
        # once it has its rows, rather than hold it until the write is durable.
        await self.store.append(
            self.session_id,
            [self.codec.encode_event(event, digest.value)],
            snapshot=snapshot,
            status=status,
        )
        self.digest.accept(digest)
