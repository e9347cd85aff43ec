"""Finding the stored sessions whose driver is gone, for `AgentSystem.orphans`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._owner import is_dead

if TYPE_CHECKING:
    from ..protocols import Machine, SessionRecord, Store
    from ._host import Registry

__all__ = ["orphaned"]


async def orphaned(
    store: Store, registry: Registry, machine: Machine[Any] | None
) -> list[SessionRecord]:
    """The sessions stored "running" that run nowhere here and whose lease is free or dead.

    A lease runs out by time, or dies with its owner's process on this host;
    sessions of other machines (by name) than ``machine`` are left out.
    """
    held = {lease.session_id: lease.owner for lease in await store.leases()}
    found = []
    for record in await store.sessions():
        if record.status != "running" or (machine and record.machine != machine.name):
            continue
        if registry.running(record.session_id):
            continue
        owner = held.get(record.session_id)
        if owner is None or is_dead(owner):
            found.append(record)
    return found
