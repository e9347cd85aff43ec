"""Checking a session's log: fold it from the start, and (optionally) run its stages again.

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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import ValidationError

from .._redact import scrub_secrets
from ..core import apply_event
from ..protocols import AgentState, EventKind, StateView, TransitionEvent
from ._recording import CallPlayback
from ._secrets import open_message
from ._stages import run_stage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..core import Keyring
    from ..core._seams import EventCodec, PatchValidator, StateHasher
    from ..protocols import Machine, Stage
    from ..protocols._seams import ScheduledMessage
    from ._secrets import HeldValues

__all__ = ["Divergence", "ReplayReport", "digest_differs", "stored_differs", "verify"]

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
