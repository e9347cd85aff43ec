"""Replaying a stored session: its log read back from the store and checked (`verify`).

A session stored by the machine's own form is decoded and folded as it is.
One stored, in whole or in part, by an earlier form (another version, or a
state type changed since) has digests made over that form's values, which
no upgrade may touch: `verify_forms` folds its earlier-form events on their
stored JSON (`StoredForm`) and checks each digest as it was made; at the
``upgrade`` event that starts the current form, the state it records is
checked against its own digest and the rest of the log is verified as usual.
A log never upgraded is then checked against its latest snapshot, and read in
the current form (what a resume would run from: an upgrade that does not
validate raises `ConfigurationError`).

A session with `Sensitive` fields is read through its journal's codec (its
sealed values opened, its digests keyed); an earlier form's sealed values are
opened under the names that form stored them by before its digests are
checked (plain or keyed: the fingerprint does not say whether that form had a
sensitive field). While it is replayed, its values are held for scrubbing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._errors import StoreCorrupt
from ..core._seams import StoredForm, opener, same_form
from ._compiled import compiled
from ._journal import UPGRADE, named, read_events, unmarked
from ._secrets import held_values
from ._verify import Divergence, ReplayReport, digest_differs, verify

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..core._seams import Sealer
    from ..protocols import AgentState, LoadedSession, StoredEvent, TransitionEvent
    from ._journal import Journal

__all__ = ["verify_forms", "verify_stored"]


async def verify_stored(journal: Journal, *, reexecute: bool = False) -> ReplayReport[Any]:
    """Fold a stored session's whole log from its start and check it (see `verify`).

    A session running meanwhile is checked as it was when the reads began:
    its record, its first snapshot and its events up to the record's last. A
    session stored by an earlier form of the machine is checked as that form
    stored it (see `verify_forms`).

    Raises:
        ConfigurationError: If the journal's machine does not read the session.
        SessionNotFound: If the store has no such session.
        StoreCorrupt: If the session's first snapshot does not decode.
    """
    parts = compiled(journal.machine)
    codec, store, session_id = journal.codec, journal.store, journal.session_id
    loaded = await journal.load()
    last = loaded.record.last_seq
    stored_events = [e for e in await store.history(session_id) if e.seq <= last]
    _, first = await store.snapshot_at(session_id, 0)
    if not same_form(loaded.record.fingerprint, parts.fingerprint) or any(
        e.kind == UPGRADE for e in stored_events
    ):
        return await verify_forms(journal, loaded, stored_events, first, reexecute=reexecute)
    try:
        initial = codec.decode_state(first)
    except StoreCorrupt as exc:
        raise named(session_id, exc)  # noqa: B904 (its cause is set)
    return await _verify_held(
        journal,
        initial,
        _decoded(journal, stored_events),
        (last, _current(journal, loaded)),
        reexecute=reexecute,
    )


async def _verify_held(
    journal: Journal,
    initial: AgentState,
    events: Sequence[tuple[TransitionEvent | str, int | None]],
    stored: tuple[int, AgentState | str],
    *,
    reexecute: bool,
    start_seq: int = 0,
    checked: int = 0,
) -> ReplayReport[Any]:
    """`verify` through the journal's codec, the session's sensitive values held meanwhile."""
    parts = compiled(journal.machine)
    held = held_values(journal.machine, initial)
    try:
        return await verify(
            journal.machine,
            journal.codec,
            parts.hasher,
            parts.validator,
            session_id=journal.session_id,
            initial=initial,
            events=events,
            stored=stored,
            reexecute=reexecute,
            held=held,
            start_seq=start_seq,
            checked=checked,
            keyring=journal.secrets,
        )
    finally:
        if held is not None:
            held.release()


def _decoded(
    journal: Journal, stored_events: Sequence[StoredEvent]
) -> list[tuple[TransitionEvent | str, int | None]]:
    codec = journal.codec
    events: list[tuple[TransitionEvent | str, int | None]] = []
    for stored in stored_events:
        try:
            events.append((codec.decode_event(stored), stored.digest))
        except StoreCorrupt as exc:
            events.append((f"the stored event does not decode: {exc}", None))
    return events


def _current(journal: Journal, loaded: LoadedSession) -> AgentState | str:
    try:
        return journal.current(loaded)
    except StoreCorrupt as exc:
        return f"the stored state does not decode: {exc}"


class _Fold:
    """The fold of a log's earlier-form events on their stored JSON (its tokens opened)."""

    __slots__ = ("checked", "digests", "folded", "form", "opener", "seen", "state")

    def __init__(self, form: StoredForm, state: Mapping[str, Any], opener: Sealer) -> None:
        self.opener = opener
        self.form = form
        self.state = dict(state)
        self.digests = form.start(state)
        self.folded = self.checked = 0
        #: The digest of the state after each event (0: the start), for the snapshot's check.
        self.seen = {0: form.value(self.digests)}

    def step(self, event: StoredEvent) -> Divergence | None:
        """Fold ``event`` in, checking its place and digest (``None``: it fits)."""
        seq = event.seq
        if seq != self.folded + 1:
            return Divergence(self.folded + 1, f"the log skips from #{self.folded} to #{seq}")
        name = self.form.lifecycle(self.state)
        if name is not None and event.from_state != name:
            return Divergence(
                seq, f"the event starts in {event.from_state}, the replayed state is in {name}"
            )
        try:
            self.state, self.digests = self.form.apply(self.state, self.digests, event)
        except (ValueError, TypeError) as exc:
            return Divergence(seq, f"the event does not apply: {exc}")
        return self._digest(event)

    def restart(self, form: StoredForm, event: StoredEvent) -> Divergence | None:
        """Go on in ``form`` from ``event``, an ``upgrade`` event into it."""
        seq = event.seq
        if seq != self.folded + 1:
            return Divergence(self.folded + 1, f"the log skips from #{self.folded} to #{seq}")
        self.form = form
        self.state = dict((event.patch or {}).get("set") or {})
        self.digests = form.start(self.state)
        return self._digest(event)

    def _digest(self, event: StoredEvent) -> Divergence | None:
        value = self.form.value(self.digests)
        if event.digest is not None:
            if not self.opener.fits_any(value, event.digest):
                keyring = self.opener.keyring  # shown keyed, as a sealed session's are
                shown = value if keyring is None else keyring.digest(value)
                return digest_differs(event.seq, shown, event.digest, first=self.checked == 0)
            self.checked += 1
        self.folded = event.seq
        self.seen[event.seq] = value
        return None


async def verify_forms(
    journal: Journal,
    loaded: LoadedSession,
    stored_events: Sequence[StoredEvent],
    first: Any,
    *,
    reexecute: bool = False,
) -> ReplayReport[Any]:
    """Check the log of a session stored, in whole or in part, by an earlier form.

    Events of an earlier form are folded on their stored JSON, each digest
    checked as its form made it (they are not re-executed: their stages are
    not this machine's); from the ``upgrade`` event into the current form on,
    as `verify` does.
    """
    machine = journal.machine
    mine = compiled(machine).fingerprint
    record = loaded.record
    keys = opener(journal.secrets, journal.session_id)
    start = keys.open_stored_state(unmarked(first))
    fold = _Fold(StoredForm(record.fingerprint, machine, mine, start), start, keys)
    for index, stored in enumerate(stored_events):
        if stored.kind == UPGRADE:
            target = (stored.io or {}).get("fingerprint")
            if isinstance(target, dict) and same_form(target, mine):
                return await _current_form(journal, loaded, stored_events[index:], fold, reexecute)
        event = dataclasses.replace(stored, patch=keys.open_stored_patch(stored.patch))
        if event.kind == UPGRADE:
            target = (event.io or {}).get("fingerprint")
            form = StoredForm(target, machine, mine, (event.patch or {}).get("set") or {})
            divergence = fold.restart(form, event)
        else:
            divergence = fold.step(event)
        if divergence is not None:
            return _report(journal, fold, divergence, loaded)
    return _report(journal, fold, await _snapshot_differs(journal, fold), loaded)


async def _snapshot_differs(journal: Journal, fold: _Fold) -> Divergence | None:
    """Why the latest snapshot is not the fold at its event (``None``: it is)."""
    latest = await journal.store.load(journal.session_id)
    seq = latest.snapshot_seq
    if seq > fold.folded or seq not in fold.seen:
        return None  # written after the reads began
    snapshot = fold.opener.open_stored_state(unmarked(latest.snapshot))
    if fold.form.value(fold.form.start(snapshot)) != fold.seen[seq]:
        return Divergence(
            seq,
            "the stored state (latest snapshot and the events after it) differs from the "
            "replay of the whole log: the snapshot does not match the events before it",
        )
    return None


def _report(
    journal: Journal, fold: _Fold, divergence: Divergence | None, loaded: LoadedSession
) -> ReplayReport[Any]:
    """The report of a log folded in an earlier form: its state read in the current one."""
    state = journal.current(loaded)
    digest = journal.codec.stored_digest(compiled(journal.machine).hasher.of(state))
    return ReplayReport(journal.session_id, fold.folded, state, digest, divergence, fold.checked)


async def _current_form(
    journal: Journal,
    loaded: LoadedSession,
    events: Sequence[StoredEvent],
    fold: _Fold,
    reexecute: bool,
) -> ReplayReport[Any]:
    """Verify ``events``, the first an ``upgrade`` event into the current form, as `verify` does."""
    machine, parts, codec = journal.machine, compiled(journal.machine), journal.codec
    upgrade, rest = events[0], events[1:]
    seq = upgrade.seq
    if seq != fold.folded + 1:
        divergence = Divergence(fold.folded + 1, f"the log skips from #{fold.folded} to #{seq}")
        return _report(journal, fold, divergence, loaded)
    try:
        state = codec.decode_state((upgrade.patch or {}).get("set") or {})
    except StoreCorrupt as exc:
        divergence = Divergence(seq, f"the state the upgrade recorded does not decode: {exc}")
        return _report(journal, fold, divergence, loaded)
    value = parts.hasher.of(state)
    checked = fold.checked
    if upgrade.digest is not None:
        if not codec.digest_fits(value, upgrade.digest):
            shown = codec.stored_digest(value)
            divergence = digest_differs(seq, shown, upgrade.digest, first=False)
            return ReplayReport(journal.session_id, fold.folded, state, shown, divergence, checked)
        checked += 1
    mine = parts.fingerprint
    current = read_events(machine, mine, mine, rest, fold.opener)
    return await _verify_held(
        journal,
        state,
        _decoded(journal, current),
        (loaded.record.last_seq, _current(journal, loaded)),
        reexecute=reexecute,
        start_seq=seq,
        checked=checked,
    )
