"""The `WorkQueue` protocol: a store whose sessions workers claim."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Collection

    from ._store import SessionRecord

__all__ = ["WorkQueue"]


@runtime_checkable
class WorkQueue(Protocol):
    """A store whose sessions workers claim: the sessions that have something to do.

    Implemented by the stores that workers share (`arkhon_rheo.system.Worker`).
    """

    async def claim(
        self, owner: str, *, machines: Collection[str], limit: int, ttl: float, now: float
    ) -> tuple[SessionRecord, ...]:
        """Lease up to `limit` sessions of these machine names that have something to do, for `owner`, `ttl` seconds; return their records.

        Something to do: status "running" with no unexpired lease (a new start, or an owner whose lease ran out), or status "waiting" with wake_at <= now.
        The leases are taken in the same transaction (Postgres: FOR UPDATE SKIP LOCKED), so two workers never claim the same session.
        """  # noqa: E501
        ...

    async def wait_for_work(self, timeout: float) -> None:  # noqa: ASYNC109 - the protocol's
        """Return when there may be new work (a post, a new session, a released lease, a park with a wake time), or after `timeout` seconds. Postgres: LISTEN/NOTIFY, polling as the fallback."""  # noqa: E501
        ...
