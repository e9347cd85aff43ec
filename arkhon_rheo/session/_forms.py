"""The form a stored session is in, and reading it in the current machine's.

A session's record names the fingerprint it was started under; a snapshot
written after an ``upgrade`` event carries the mark of its form (see
`arkhon_rheo.core` ``_upgrade``). `form_of` says which fingerprint a
snapshot was stored under, `check_form` whether the current machine reads it
(directly, as a compatible change, or through its upgrades) and, if not,
raises the `ConfigurationError` that names what differs and how to declare
it. `upgraded` reads a loaded session in the current form; `upgrade_event`
is the event that records, before anything else is written to it, that the
session is read in the current form from then on.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import ConfigurationError, StoreCorrupt
from ..core._seams import (
    checked_fingerprint,
    differences,
    legacy_schema,
    same_form,
    upgrade_hint,
    version_of,
)
from ..protocols import LoadedSession
from ._upgrade import UPGRADE, Upgrader, mark_of, read_events

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..core._seams import Sealer
    from ..protocols import Machine, SessionRecord, Store

__all__ = [
    "SessionForm",
    "check_form",
    "decode_error",
    "form_of",
    "named",
    "upgrade_info",
    "upgraded",
]


class SessionForm(NamedTuple):
    """The form a loaded session is stored in, as the machine that reads it sees it."""

    #: The fingerprint its latest snapshot was stored under (``None``: stored before
    #: fingerprints, read as the machine's own).
    stored: Mapping[str, Any] | None
    #: Whether it is read as it is: nothing to upgrade, no ``upgrade`` event to write.
    same: bool
    #: Whether the snapshots written for it carry a form mark (its record names
    #: another form than the machine's).
    marked: bool


def check_form(
    session_id: str,
    record_machine: str,
    machine: Machine[Any],
    mine: Mapping[str, Any],
    stored: Mapping[str, Any] | None,
) -> None:
    """Raise `ConfigurationError` unless ``machine`` reads what ``stored`` describes.

    A session stored before fingerprints (schema version 3) is checked by name
    only; one of an unnamed machine then still has the old default name.

    Raises:
        ConfigurationError: If the machine does not read it, naming what differs.
        StoreCorrupt: If ``stored`` is damaged: not of a fingerprint's shape.
    """
    stored = checked_fingerprint(session_id, stored)
    if stored is None:
        legacy = record_machine == "machine" and machine.name == mine["state"]
        if record_machine == machine.name or legacy:
            return
        found = ["the name differs"]
    elif stored.get("name", record_machine) != machine.name:
        found = [f"the session's machine is {stored.get('name')!r}"]
    else:
        try:
            found = differences(
                stored, mine, legacy=functools.partial(legacy_schema, machine.state_type)
            )
            hint = upgrade_hint(stored, mine) if found else ""
        except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
            # A fingerprint of the right keys whose JSON schemas are not of their shape.
            raise StoreCorrupt(
                f"session {session_id!r} is damaged in the store: the machine fingerprint it "
                f"was stored with does not read ({type(exc).__name__}: {exc}). Restore the "
                "store from a backup, or delete the session",
                session_id=session_id,
            ) from exc
        if found:
            raise ConfigurationError(
                f"session {session_id!r} was stored by version {version_of(stored)} of machine "
                f"{machine.name!r}, which this machine (version {machine.version}) does not "
                f"read: {'; '.join(found)}. {hint}"
            )
        return
    raise ConfigurationError(
        f"session {session_id!r} runs machine {record_machine!r}, not {machine.name!r}: "
        f"{'; '.join(found)}. Pass the machine it was started with"
    )


async def form_of(
    store: Store,
    machine: Machine[Any],
    mine: Mapping[str, Any],
    record: SessionRecord,
    snapshot: Any,
) -> SessionForm:
    """The form of ``snapshot``, a snapshot of ``record``'s session, checked readable.

    Raises:
        ConfigurationError: If the machine does not read it (see `check_form`).
        StoreCorrupt: If its mark names a form no ``upgrade`` event of the session has.
    """
    mark = mark_of(snapshot)
    if mark is None:
        stored = record.fingerprint
    elif mark.get("form") == mine["form"]:
        stored = mine
    else:
        stored = await _fingerprint_of(store, record.session_id, mark)
    check_form(record.session_id, record.machine, machine, mine, stored)
    return SessionForm(stored, same_form(stored, mine), not same_form(record.fingerprint, mine))


async def _fingerprint_of(
    store: Store, session_id: str, mark: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The fingerprint of form ``mark``, as the session's ``upgrade`` event recorded it."""
    for event in reversed(await store.history(session_id)):
        if event.kind == UPGRADE:
            fingerprint = (event.io or {}).get("fingerprint")
            if isinstance(fingerprint, dict) and fingerprint.get("form") == mark.get("form"):
                return fingerprint
    raise StoreCorrupt(
        f"a snapshot of session {session_id!r} is of form {mark.get('form')!r} (version "
        f"{mark.get('version')!r}), which no upgrade event of the session records"
    )


def upgraded(
    machine: Machine[Any],
    mine: Mapping[str, Any],
    form: SessionForm,
    loaded: LoadedSession,
    opener: Sealer | None = None,
) -> LoadedSession:
    """``loaded`` (its snapshot in ``form``) in the current form: its snapshot and events.

    ``opener`` opens the sealed values an upgrade reads (see ``Upgrader``).
    """
    if form.same and mark_of(loaded.snapshot) is None:
        return loaded
    snapshot = Upgrader(machine, form.stored, mine, opener=opener).state(loaded.snapshot)
    events = tuple(read_events(machine, mine, form.stored, loaded.events, opener))
    return LoadedSession(loaded.record, loaded.snapshot_seq, snapshot, events)


def upgrade_info(
    form: SessionForm | None, machine: Machine[Any], mine: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``info`` of the ``upgrade`` event of a session read in ``form`` by ``machine``."""
    stored = None if form is None else form.stored
    return {
        "upgrade": {"from": version_of(stored), "to": machine.version},
        "fingerprint": dict(mine),
    }


def decode_error(
    session_id: str, form: SessionForm, machine: Machine[Any], exc: Exception
) -> ConfigurationError:
    """The error for a session whose upgraded values do not validate as ``machine``'s."""
    return ConfigurationError(
        f"session {session_id!r} (version {version_of(form.stored)} of machine "
        f"{machine.name!r}) does not load as version {machine.version} after its upgrades: "
        f"{exc}. Fix the machine's upgrades (or give the fields defaults), then run "
        "`arkhon-rheo check --machine MODULE:ATTR --store PATH`"
    )


def named(session_id: str, exc: StoreCorrupt) -> StoreCorrupt:
    """``exc``, naming session ``session_id`` if it names none (a stored value not decoding)."""
    if exc.session_id is not None:
        return exc
    error = StoreCorrupt(
        f"session {session_id!r} is damaged in the store: {exc}. Restore the store from a "
        "backup, or delete the session",
        location=exc.location,
        session_id=session_id,
    )
    error.__cause__ = exc
    return error
