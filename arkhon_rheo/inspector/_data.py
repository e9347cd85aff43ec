"""What the inspector's pages show, read from a store: sessions, timelines, state diffs.

Everything here needs the store only. A session's timeline folds its stored
patches, from its first snapshot, into the state after every event, and
compares each with the one before. Given the session's machine, the fold is
the supervisor's own (`arkhon_rheo.core.apply_event`), so derived
fields (the lifecycle, the iteration count) are exact, and a session of an
earlier version is folded as the machine reads it (upgraded); without one, the
stored patches are folded as JSON data and the lifecycle follows each event's
target state. A `Sensitive` field's value is never shown: ``[SENSITIVE]`` stands
in the states, the patches and the recorded calls.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..core import apply_event
from ..core._seams import masked, shown_state, waits_for
from ..session._seams import read_session

if TYPE_CHECKING:
    from ..core import Keyring
    from ..core._seams import WaitsFor
    from ..protocols import Machine, SessionRecord, Store, StoredEvent

__all__ = ["Change", "SessionSummary", "Step", "Timeline", "load_timeline", "summarize"]

#: Statuses in which a session can still change on its own.
LIVE = frozenset({"running"})


def when(timestamp: float | None) -> str:
    """A wall-clock time as ISO 8601 UTC, to the millisecond (empty for ``None``)."""
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


def dumps(value: Any) -> str:
    """JSON text of a stored value, for display (keys kept in their order)."""
    return json.dumps(value, ensure_ascii=False, default=repr)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One row of the session list.

    Attributes:
        session_id: The session.
        machine: Its machine's name.
        status: Its stored status.
        steps: How many events its log holds.
        updated: When it last changed (ISO 8601 UTC).
        parent: The session it was forked from, if any.
    """

    session_id: str
    machine: str
    status: str
    steps: int
    updated: str
    parent: str | None

    def as_json(self) -> dict[str, Any]:
        """The row as JSON data (the ``/api/sessions`` answer)."""
        return {
            "session_id": self.session_id,
            "machine": self.machine,
            "status": self.status,
            "steps": self.steps,
            "updated": self.updated,
            "parent": self.parent,
        }


def summarize(record: SessionRecord) -> SessionSummary:
    """The list row of a stored session's record."""
    return SessionSummary(
        session_id=record.session_id,
        machine=record.machine,
        status=record.status,
        steps=record.last_seq,
        updated=when(record.updated_at),
        parent=record.parent,
    )


@dataclass(frozen=True, slots=True)
class Change:
    """One field an event changed, shown by what changed in it, as JSON text.

    A sequence that grew shows only its new items (``appended``), one that
    shrank to a prefix of itself only the items it lost (``removed``); a
    mapping shows only its changed keys (``keys``: each key's value before and
    after); any other value is shown whole (``before`` and ``after``). So a
    step that adds one message to a long conversation shows that message, not
    the conversation.

    Attributes:
        name: The field.
        before: Its value before (empty when only its items or keys are shown).
        after: Its value after (likewise).
        appended: The items added to the end of a sequence.
        removed: The items taken off the end of a sequence.
        kept: How many items the sequence kept from before.
        keys: The changed keys of a mapping: ``(key, before, after)``, a key
            added or removed shown as ``absent`` on the other side.
    """

    name: str
    before: str
    after: str
    appended: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: int = 0
    keys: tuple[tuple[str, str, str], ...] = ()


#: How a mapping's key missing on one side of a change is shown.
ABSENT = "absent"


def _change(name: str, before: Any, after: Any) -> Change:
    """What changed in the field ``name`` from ``before`` to ``after``, as little as shows it."""
    if isinstance(before, list) and isinstance(after, list) and len(after) != len(before):
        short, long = (before, after) if len(before) < len(after) else (after, before)
        if long[: len(short)] == short:
            tail = tuple(dumps(item) for item in long[len(short) :])
            if long is after:
                return Change(name, "", "", appended=tail, kept=len(short))
            return Change(name, "", "", removed=tail, kept=len(short))
    if isinstance(before, dict) and isinstance(after, dict):
        keys = tuple(
            (
                str(key),
                dumps(before[key]) if key in before else ABSENT,
                dumps(after[key]) if key in after else ABSENT,
            )
            for key in dict.fromkeys([*before, *after])
            if before.get(key, _MISSING) != after.get(key, _MISSING)
        )
        return Change(name, "", "", keys=keys)
    return Change(name, dumps(before), dumps(after))


_MISSING = object()


@dataclass(frozen=True, slots=True)
class Step:
    """One event of a session's timeline, ready to show.

    Attributes:
        event: The stored event.
        changes: The fields whose value differs from the state before.
        calls: The model and tool calls recorded in the step (kind, request, response).
        info: The event's other facts (a gate, a decision, a rollback's numbers).
        duration_ms: How long the stage ran, in milliseconds.
    """

    event: StoredEvent
    changes: tuple[Change, ...]
    calls: tuple[dict[str, Any], ...]
    info: dict[str, Any]
    duration_ms: float

    @property
    def failed(self) -> bool:
        """Whether the event records a failure."""
        return self.event.error is not None

    @property
    def started(self) -> str:
        """The step's start, ISO 8601 UTC."""
        return when(self.event.started_at)


@dataclass(frozen=True, slots=True)
class Timeline:
    """A session's whole stored story.

    Attributes:
        record: The session's record.
        steps: Its events, in order, each with what it changed.
        state: The state after the last event, field by field, as JSON text.
        exact: Whether the states were folded by the session's machine.
        states: The state before the first event, then after each, as JSON
            data (``states[seq]`` is the state after event ``seq``).
        restarts: Failures the session went on from (recoverable or transient).
        waits: What the session waits for (a paused one: the decision at its
            gate), if it waits; with the machine, the gate's field and its type.
    """

    record: SessionRecord
    steps: tuple[Step, ...]
    state: dict[str, str]
    exact: bool
    states: tuple[dict[str, Any], ...] = ()
    restarts: int = 0
    waits: WaitsFor | None = None


def _fold_json(state: dict[str, Any], event: StoredEvent) -> dict[str, Any]:
    """Apply a stored event's patch to a state kept as JSON data."""
    patch = event.patch or {}
    after = {**state, **(patch.get("set") or {})}
    for name, items in (patch.get("append") or {}).items():
        after[name] = [*(after.get(name) or []), *items]
    after["lifecycle"] = event.to_state
    return after


def _folded_states(
    snapshot: Any, events: tuple[StoredEvent, ...]
) -> tuple[list[dict[str, Any]], bool]:
    """The state before the first event and after each, folded as JSON data (not exact).

    A `Sensitive` field's value is ``[SENSITIVE]`` in every state.
    """
    current: dict[str, Any] = copy.deepcopy(masked(dict(snapshot)))
    if events:
        current["lifecycle"] = events[0].from_state
    states = [current]
    for event in events:
        current = masked(_fold_json(current, event))
        states.append(current)
    return states, False


def _exact_states(
    machine: Machine[Any],
    record: SessionRecord,
    snapshot: Any,
    stored: tuple[StoredEvent, ...],
    secrets: Keyring | None,
) -> tuple[list[dict[str, Any]], bool]:
    """The states of the machine's own fold, the session read as the machine reads it.

    A session of an earlier version is upgraded (its sealed values opened
    under the names it stored them by first), then folded through the
    session's codec (which opens those sealed in the current form).
    """
    state, events = read_session(machine, record, snapshot, stored, secrets)
    states = [shown_state(state)]
    for event in events:
        state = apply_event(machine, state, event)
        states.append(shown_state(state))
    return states, True


def _shown(event: StoredEvent) -> StoredEvent:
    """``event`` as shown: each sealed value in its patch and recorded calls as ``[SENSITIVE]``."""
    patch, io = masked(event.patch), masked(event.io)
    if patch is event.patch and io is event.io:
        return event
    return dataclasses.replace(event, patch=patch, io=io)


def _calls(event: StoredEvent) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """The recorded calls of an event, and its other facts."""
    io = dict(event.io or {}) if isinstance(event.io, dict) else {"io": event.io}
    calls = io.pop("io", None) or ()
    return tuple(call for call in calls if isinstance(call, dict)), io


async def load_timeline(
    store: Store,
    session_id: str,
    machine: Machine[Any] | None = None,
    secrets: Keyring | None = None,
) -> Timeline:
    """Read a session's record, first snapshot and events, and fold them into a timeline.

    Nothing in it shows a `Sensitive` value: the states show ``[SENSITIVE]`` in
    its place, and the events' patches and recorded calls their sealed tokens
    as ``[SENSITIVE]``.

    Args:
        store: The store (entered).
        session_id: The session.
        machine: The session's machine, for an exact fold; ``None`` folds JSON data.
        secrets: The keyring a machine with sensitive fields needs for an exact fold.

    Returns:
        The session's timeline.

    Raises:
        SessionNotFound: If the store has no such session.
        StoreCorrupt: If, with a machine, a stored state or event does not decode.
        KeyringError: If, with a machine with sensitive fields, ``secrets`` does
            not open them.
    """
    record = await store.record(session_id)
    stored = tuple(await store.history(session_id))
    events = tuple(_shown(event) for event in stored)
    _, snapshot = await store.snapshot_at(session_id, 0)
    if machine is not None:
        states, exact = _exact_states(machine, record, snapshot, stored, secrets)
    else:
        states, exact = _folded_states(snapshot, events)
    steps: list[Step] = []
    restarts = 0
    for index, event in enumerate(events):
        before, after = states[index], states[index + 1]
        changes = tuple(
            _change(name, before.get(name), after[name])
            for name in after
            if after[name] != before.get(name)
        )
        calls, info = _calls(event)
        steps.append(
            Step(
                event=event,
                changes=changes,
                calls=calls,
                info=info,
                duration_ms=max(0.0, (event.finished_at - event.started_at) * 1000.0),
            )
        )
        error = event.error if isinstance(event.error, dict) else None
        if error is not None and error.get("error_class") in ("recoverable", "transient"):
            restarts += 1
    return Timeline(
        record=record,
        steps=tuple(steps),
        state={name: dumps(value) for name, value in states[-1].items()},
        exact=exact,
        states=tuple(states),
        restarts=restarts,
        waits=waits_for(record, events, machine),
    )
