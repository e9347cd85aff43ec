"""Replay: a session's log folded from the start and checked, its stages optionally run again.

`verify` folds a session's events on its first snapshot with `apply_event`,
the rule the supervisor commits by, and compares the digest of each state it
reaches with the digest the event was stored with, then the end result with
the stored state (the latest snapshot and the events after it, what a resume
would run from). The first event that does not fit is reported, with why.

With ``reexecute``, each step's stage runs again on the replayed state, its
model and tool calls answered from the calls recorded in the event
(`CallPlayback`): it must ask the same things, propose the same patch and
choose the same next state. Each step runs on a fresh stage instance (a stage
whose patch depends on what its instance kept from earlier steps cannot be
replayed step by step). Stage code really runs: the model and the tools are
not called only in so far as the stage calls them through `record_call`.

**A stored session's replay** reads its log back from the store and checks it (`verify`).

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
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import ValidationError

from .._errors import StoreCorrupt
from .._redact import scrub_secrets
from ..core import apply_event
from ..core._seams import StoredForm, opener, same_form
from ..protocols import AgentState, EventKind, StateView, TransitionEvent
from ._compiled import compiled
from ._journal import UPGRADE, named, read_events, unmarked
from ._recording import CallPlayback
from ._secrets import held_values, open_message
from ._supervisor import run_stage

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..core import Keyring
    from ..core._seams import EventCodec, Sealer
    from ..protocols import LoadedSession, Machine, Stage, StoredEvent
    from ..protocols._seams import ScheduledMessage
    from ._commit_rule import PatchValidator, StateHasher
    from ._journal import Journal
    from ._secrets import HeldValues

__all__ = [
    "Divergence",
    "ReplayReport",
    "digest_differs",
    "stored_differs",
    "verify",
    "verify_forms",
    "verify_stored",
]


S = TypeVar("S", bound=AgentState)


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first parted from what was committed.

    Attributes:
        seq: The event (or the snapshot's event number) that does not fit.
        reason: What differed.
    """

    seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class ReplayReport(Generic[S]):
    """What replaying a session's log found.

    Attributes:
        session_id: The session.
        events: How many events were folded (up to the divergence, if any).
        state: The state the fold reached (before the divergent event, if any).
        digest: That state's 64-bit digest, as stored (keyed, for a machine with
            `Sensitive` fields: see `Keyring`).
        divergence: The first event that does not fit, or ``None``.
        checked: How many events' digests were compared (events stored
            without one, by a store that does not keep them, are folded only).
        reexecuted: How many stages ran again (``reexecute=True``).
    """

    session_id: str
    events: int
    state: S
    digest: int
    divergence: Divergence | None
    checked: int = 0
    reexecuted: int = 0

    @property
    def ok(self) -> bool:
        """Whether the log folds to the committed states, event by event."""
        return self.divergence is None


class _Verifier:
    __slots__ = ("codec", "keyring", "machine", "session_id", "validator")

    def __init__(
        self,
        machine: Machine[Any],
        codec: EventCodec,
        validator: PatchValidator,
        session_id: str,
        keyring: Keyring | None = None,
    ) -> None:
        self.keyring = keyring
        self.machine = machine
        self.codec = codec
        self.validator = validator
        self.session_id = session_id

    def _opened(self, timer: Any, scheduled: list[ScheduledMessage] | None) -> Any:
        """A recorded timer's payload opened, by its kind's class (this run's or the machine's)."""
        models: dict[str, Any] = dict(self.machine.messages)
        models.update((t.kind, t.model) for t in scheduled or () if t.model is not None)
        return _opened_payload(timer, models, self.keyring, self.session_id)

    async def reexecute(self, state: AgentState, event: TransitionEvent) -> str | None:
        """Run the event's stage again on ``state``; say how it differs, if it does."""
        machine = self.machine
        stage_type = machine.stages.get(state.lifecycle)
        if stage_type is None or stage_type.name != event.stage:
            running = None if stage_type is None else stage_type.name
            return (
                f"the machine runs stage {running!r} in {state.lifecycle.name}, "
                f"the log has {event.stage!r}"
            )
        name = stage_type.name
        instance: Stage[Any] = stage_type()
        info = event.info or {}
        records = info.get("io", [])
        if machine.waits_in(state.lifecycle):
            problem = _deliver(instance, info.get("message"), self.keyring, self.session_id)
            if problem is not None:
                return f"stage {name!r}: {problem}"
        playback = CallPlayback(records, self.session_id)
        playback.step = event.seq  # what its timers' ids are made from, as in the recorded run
        view: StateView[Any] = StateView(state, stage_type.reads, name)
        outcome = await run_stage(instance, view, machine.deadlines.get(state.lifecycle), playback)
        if playback.diverged is not None:
            return str(playback.diverged)
        if isinstance(outcome, Exception):
            return f"stage {name!r} raised {outcome!r}; the recorded run committed its patch"
        if playback.unused():
            return (
                f"stage {name!r} made {playback.position} of the {len(records)} calls "
                "the recorded run made"
            )
        try:
            updates, patch = self.validator.validate(
                state, outcome, stage=name, writes=stage_type.writes
            )
            target = instance.next(state.model_copy(update=updates))
        except Exception as exc:
            return f"stage {name!r}'s patch is refused now: {exc}"
        recorded = event.patch
        # Validated values compared as values: a set's stored order is not its own.
        if patch.values != recorded.values or patch.appends != recorded.appends:
            proposed = self.codec.describe_patch(patch, stage=name)
            stored = self.codec.describe_patch(recorded, stage=name)
            return f"stage {name!r} proposed {proposed}, the recorded run {stored}"
        timers = [timer.describe(0.0) for timer in playback.timers or ()]
        recorded_timers = [
            {**timer, "due_at": 0.0, "payload": self._opened(timer, playback.timers)}
            for timer in info.get("timers", ())
        ]
        if timers != recorded_timers:
            return f"stage {name!r} scheduled {timers}, the recorded run {recorded_timers}"
        if not (isinstance(target, enum.Enum) and target is event.to_state):
            return (
                f"stage {name!r} chose {target!r} as the next state, "
                f"the recorded run {event.to_state.name}"
            )
        return None


async def verify(
    machine: Machine[Any],
    codec: EventCodec,
    hasher: StateHasher,
    validator: PatchValidator,
    *,
    session_id: str,
    initial: AgentState,
    events: Sequence[tuple[TransitionEvent | str, int | None]],
    stored: tuple[int, AgentState | str],
    reexecute: bool = False,
    held: HeldValues | None = None,
    start_seq: int = 0,
    checked: int = 0,
    keyring: Keyring | None = None,
) -> ReplayReport[Any]:
    """Replay ``events`` on ``initial`` and check them against what was committed.

    Args:
        machine: The session's machine.
        codec: Its codec (patches are compared in their stored form).
        hasher: Digests its states.
        validator: Validates re-executed patches.
        session_id: The session.
        initial: Its first snapshot.
        events: Each event with its stored digest; an event that did not decode
            is given as the reason it did not.
        stored: The event number and state a resume would run from (or why not).
        reexecute: Run each step's stage again against its recorded calls.
        held: The session's sensitive values held for scrubbing, as its run held
            them (``initial``'s already, each event's once it folds).
        start_seq: The event ``initial`` is the state after (0: the start).
        checked: Digests already checked before it (by `verify_forms`).
        keyring: Opens the sealed fields of the messages its steps applied.

    Returns:
        The report. Its digests are given as stored (keyed, for a machine with
        sensitive fields), and a divergence's reason is scrubbed of the values held.
    """
    verifier = _Verifier(machine, codec, validator, session_id, keyring)
    state = initial
    digest = hasher.start(state)
    folded, reexecuted = start_seq, 0

    def report(divergence: Divergence | None) -> ReplayReport[Any]:
        if divergence is not None:
            divergence = Divergence(divergence.seq, scrub_secrets(divergence.reason))
        stored_digest = codec.stored_digest(digest.value)
        return ReplayReport(
            session_id, folded, state, stored_digest, divergence, checked, reexecuted
        )

    for event, expected in events:
        if isinstance(event, str):
            return report(Divergence(folded + 1, event))
        divergence = _out_of_place(event, folded, state)
        if divergence is not None:
            return report(divergence)
        seq = event.seq
        if reexecute and event.kind is EventKind.STEP:
            reason = await verifier.reexecute(state, event)
            reexecuted += 1
            if reason is not None:
                return report(Divergence(seq, reason))
        try:
            after = apply_event(machine, state, event)
            following = digest.after(event, after)
        except Exception as exc:
            return report(Divergence(seq, f"the event does not apply: {exc!r}"))
        if expected is not None:
            if not codec.digest_fits(following.value, expected):
                replayed = codec.stored_digest(following.value)
                return report(digest_differs(seq, replayed, expected, first=checked == 0))
            checked += 1
        state = after
        digest.accept(following)
        folded = seq
        if held is not None:
            held.event(event)
    return report(stored_differs(stored, folded, hasher, digest.value))


def _out_of_place(event: TransitionEvent, folded: int, state: AgentState) -> Divergence | None:
    """Why ``event`` cannot follow event ``folded``, which led to ``state`` (``None``: it can)."""
    seq = event.seq
    if seq != folded + 1:
        return Divergence(folded + 1, f"the log skips from #{folded} to #{seq}")
    if event.from_state is not state.lifecycle:
        return Divergence(
            seq,
            f"the event starts in {event.from_state.name}, "
            f"the replayed state is in {state.lifecycle.name}",
        )
    return None


def digest_differs(seq: int, replayed: int, expected: int, *, first: bool) -> Divergence:
    """Event ``seq``'s replayed state has digest ``replayed``; it was stored with ``expected``."""
    hint = "; at the first event, this often means the state type changed since" if first else ""
    return Divergence(
        seq,
        "the replayed state differs from the state committed by this event "
        f"(digest {replayed:#x}, stored {expected:#x}){hint}",
    )


def stored_differs(
    stored: tuple[int, AgentState | str], folded: int, hasher: StateHasher, replayed: int
) -> Divergence | None:
    """Why the state a resume would run from is not the replay's end (``None``: it is)."""
    stored_seq, stored_state = stored
    if isinstance(stored_state, str):
        return Divergence(stored_seq, stored_state)
    if stored_seq != folded:
        return Divergence(
            stored_seq, f"the session's last event is #{stored_seq}, the log's #{folded}"
        )
    if hasher.of(stored_state) != replayed:
        return Divergence(
            stored_seq,
            "the stored state (latest snapshot and the events after it) differs from the "
            "replay of the whole log: the snapshot does not match the events before it",
        )
    return None


def _opened_payload(
    timer: Any, models: dict[str, Any], keyring: Keyring | None, session_id: str
) -> Any:
    """A recorded timer's payload, its sealed fields opened (see ``_secrets``)."""
    if not isinstance(timer, dict):
        return None
    kind, payload = timer.get("kind"), timer.get("payload")
    model = models.get(kind) if isinstance(kind, str) else None
    if model is None:
        return payload
    return open_message(model, str(kind), payload, keyring, session_id)


def _deliver(instance: Any, message: Any, keyring: Keyring | None, session_id: str) -> str | None:
    """Hand a receiving stage the message its recorded step applied; say what is wrong, if any.

    Its sealed fields are opened with ``keyring`` (see ``_secrets``).
    """
    if not isinstance(message, dict):
        return "the recorded step applied no message"
    name = message.get("kind")
    kind = instance.received().get(name)  # a kind's older name too
    if kind is None:
        return f"it does not accept the recorded message's kind {name!r}"
    payload = open_message(kind, str(name), message.get("payload"), keyring, session_id)
    try:
        instance.delivered = kind.model_validate(payload)
    except ValidationError as exc:
        return f"the recorded message does not fit its kind now: {exc.errors(include_url=False)}"
    return None


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
