"""Fencing: an append made for a lease's owner is refused once another owner took the lease.

An append may name the owner it is made for (and, where the store keeps them,
the fencing token that owner was given when it took the lease). It is checked
against the lease as the batch sees it, in the batch's own transaction: unless
that owner still holds the lease (under that token), the append is refused
with `LeaseLost` and nothing of it is written. A lease that ran out but that
no other owner took still lets its owner commit.
"""

from __future__ import annotations

from typing import Protocol

from .._errors import LeaseLost

__all__ = ["Fenced", "Lease", "fence", "renewal_refused"]

#: ``(owner, expires_at)`` of a lease.
Lease = tuple[str, float]


class Fenced(Protocol):
    """An append as fencing sees it (`._plan.Append`)."""

    session_id: str
    #: Who the append is made for.
    owner: str | None
    #: The fencing token the store got when ``owner`` took the lease, if known.
    token: int | None


def fence(
    request: Fenced, held: dict[str, Lease], tokens: dict[str, int] | None, location: str
) -> LeaseLost | None:
    """Refuse ``request`` unless its owner holds its session's lease (under its token).

    Args:
        request: An append naming its ``owner``.
        held: The leases as the batch sees them, by session.
        tokens: The fencing token of each lease, where the store keeps them.
        location: The store, for the error.
    """
    sid, owner, token = request.session_id, request.owner, request.token
    assert owner is not None
    lease = held.get(sid)
    if (
        lease is not None
        and lease[0] == owner
        and (token is None or tokens is None or tokens.get(sid, token) == token)
    ):
        return None
    holder = None if lease is None else lease[0]
    return LeaseLost(session_id=sid, owner=owner, holder=holder, location=location)


def renewal_refused(
    session_id: str, owner: str, lease: Lease | None, location: str
) -> LeaseLost | None:
    """Refuse a renewal of ``owner``'s lease unless ``owner`` holds ``lease`` (expired or not).

    A lease given up, or taken by another owner since (even if given up again),
    is not renewed: its old holder was paused past it, and others may have
    driven the session on meanwhile.
    """
    if lease is not None and lease[0] == owner:
        return None
    holder = None if lease is None else lease[0]
    return LeaseLost(session_id=session_id, owner=owner, holder=holder, location=location)
