"""`EventLog`: a session's events kept in memory as plain slots of one list.

A session without a store keeps its events in memory: they are its only
record. Kept as `TransitionEvent` objects, each event is two or three objects
the cyclic garbage collector tracks (the event, its patch, a dict or two), and
at thousands of sessions those objects are what its collections walk, again and
again, as the logs grow. Kept as one tuple each, an event is still one new
object the collector counts: the young collections that a run of thousands of
sessions makes, and the objects they promote, grow with the number of commits.

Here an event adds no object of its own. Its fields are appended to the log's
one flat list: the enum members and field-name sets it names replaced by their
numbers in the machine's `Interner`, its session id left out (the log's), the
patch's field names as tuples of strings shared through the interner, then the
patch's values. A second list holds where each event ends. The only objects an
event brings are the values it holds that were objects already (a model
appended to a `History`, say). An event is rebuilt, equal to the one appended,
when it is read.

An event's ``info`` (the calls its stage recorded, with their requests and
responses: nested dicts and lists, a few dozen objects a step) is kept as its
`marshal` bytes, one object the collector never tracks, when it is built-in
data only (dicts, lists, tuples, sets, strings, numbers, booleans, None: what
`marshal` reads back as equal data of the same types; a NaN reads back as a
NaN, which equals nothing); it is read again when the event is read.
"""

from __future__ import annotations

import marshal
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from ..protocols import Patch, TransitionEvent

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["EventLog", "Interner"]

#: The most objects one machine's interner numbers; past it, rows keep the objects.
_INTERNED_MAX = 4096

#: Where an event's patch values start: after its 14 fields.
_TAIL = 14


def _pack(info: Any) -> Any:
    """``info`` as its `marshal` bytes, or (not built-in data only) ``info`` itself.

    `marshal` writes only objects of the built-in types themselves (a subclass,
    an enum member or a model is refused), so what it reads back is equal data of
    the very same types. Never bytes for anything else: an event whose ``info``
    is bytes is kept whole.
    """
    if type(info) is not dict:
        return info
    try:
        return marshal.dumps(info)
    except ValueError:  # an object marshal does not write; nested too deep
        return info


def _is_text(info: Any) -> bool:
    return type(info) is bytes


def _unpack(info: Any) -> Any:
    return marshal.loads(info) if type(info) is bytes else info


class Interner:
    """Numbers for the few long-lived objects events name: states, kinds, field sets.

    The objects are kept (their ``id`` stays theirs), one list per machine, so
    they live as long as the machine does.
    """

    __slots__ = ("_index", "_lock", "_names", "objects")

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self._index: dict[object, int] = {}
        self._names: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def names(self, names: tuple[Any, ...]) -> tuple[Any, ...]:
        """The one tuple equal to ``names`` that this machine's logs share (bounded)."""
        found = self._names.get(names)
        if found is not None:
            return found
        if len(self._names) < _INTERNED_MAX:
            return self._names.setdefault(names, names)
        return names

    def number(self, item: Any) -> Any:
        """``item``'s number, or ``item`` itself once the table is full.

        A field-name set is numbered by its value (equal sets share a number);
        anything else by its identity.
        """
        key = item if type(item) is frozenset else id(item)
        found = self._index.get(key)
        if found is not None:
            return found
        if type(item) is int:
            return item  # an int stays what it is: a number means an interned object
        with self._lock:  # a machine's sessions may run in several threads' loops
            found = self._index.get(key)
            if found is not None:
                return found
            if len(self.objects) >= _INTERNED_MAX:
                return item
            self.objects.append(item)
            number = self._index[key] = len(self.objects) - 1
            return number


class EventLog(Sequence[TransitionEvent]):
    """The events of one session, in order (see the module's doc).

    Args:
        session_id: The session whose events it keeps.
        interner: The machine's interner.
    """

    __slots__ = ("_data", "_ends", "_interner", "session_id")

    def __init__(self, session_id: str, interner: Interner) -> None:
        self.session_id = session_id
        self._interner = interner
        #: The events' slots, one after the other.
        self._data: list[Any] = []
        #: Where each event's slots end; negated for an event kept as it is, in one slot.
        self._ends: list[int] = []

    def _keep(self, event: TransitionEvent) -> None:
        """Keep ``event`` as it is (not this log's shape), in one slot."""
        self._data.append(event)
        self._ends.append(-len(self._data))

    def append(self, event: TransitionEvent) -> None:
        """Keep ``event`` at the end."""
        if type(event) is not TransitionEvent:
            self._keep(event)
            return
        # One unpacking instead of a field access each: this runs at every commit.
        (
            session_id,
            seq,
            kind,
            stage,
            origin,
            target,
            reads,
            writes,
            patch,
            attempt,
            started_at,
            finished_at,
            error,
            info,
        ) = event
        if (
            session_id != self.session_id
            or type(patch) is not Patch
            or type(reads) is not frozenset
            or type(writes) is not frozenset
            or _is_text(info)  # bytes in this slot mean packed info (`_pack`)
        ):
            self._keep(event)
            return
        interner = self._interner
        get = interner._index.get
        # The members and sets an event names are nearly always numbered already.
        kind_number = get(id(kind))
        origin_number = get(id(origin))
        target_number = get(id(target))
        reads_number = get(reads)
        writes_number = get(writes)
        if (
            kind_number is None
            or origin_number is None
            or target_number is None
            or reads_number is None
            or writes_number is None
        ):
            if not _numberable(event):
                self._keep(event)  # an int where a member belongs
                return
            number = interner.number
            kind_number, origin_number, target_number = number(kind), number(origin), number(target)
            reads_number, writes_number = number(reads), number(writes)
        values, appends = patch._parts()
        # The patch's names: the assigned fields; the appended fields, then their
        # counts. Its values follow the event's fields, the assigned ones first.
        names = interner.names
        data = self._data
        data += (
            seq,
            kind_number,
            stage,
            origin_number,
            target_number,
            reads_number,
            writes_number,
            names(tuple(values)) if values else (),
            names((*appends, *map(len, appends.values()))) if appends else (),
            attempt,
            started_at,
            finished_at,
            error,
            None if info is None else _pack(info),
        )
        if values:
            data += values.values()
        for items in appends.values():
            data += items
        self._ends.append(len(data))

    def extend(self, events: Iterable[TransitionEvent]) -> None:
        """Keep ``events`` at the end, in order."""
        if (
            isinstance(events, EventLog)
            and events._interner is self._interner
            and events.session_id == self.session_id
        ):
            # The same slots: nothing decoded and encoded again.
            base = len(self._data)
            self._data += events._data
            self._ends += [end + base if end > 0 else end - base for end in events._ends]
            return
        for event in events:
            self.append(event)

    def clear(self) -> None:
        """Forget every event."""
        self._data.clear()
        self._ends.clear()

    def _event(self, start: int, end: int) -> TransitionEvent:
        data = self._data
        if end < 0:
            kept: TransitionEvent = data[start]
            return kept
        objects = self._interner.objects
        (
            seq,
            kind,
            stage,
            origin,
            target,
            reads,
            writes,
            assigned,
            appended,
            attempt,
            started_at,
            finished_at,
            error,
            info,
        ) = data[start : start + _TAIL]
        at = start + _TAIL
        values = dict(zip(assigned, data[at : at + len(assigned)], strict=True))
        at += len(assigned)
        appends: dict[str, tuple[Any, ...]] = {}
        if appended:
            half = len(appended) // 2
            for field, count in zip(appended[:half], appended[half:], strict=True):
                appends[field] = tuple(data[at : at + count])
                at += count
        return TransitionEvent(
            self.session_id,
            seq,
            objects[kind] if type(kind) is int else kind,
            stage,
            objects[origin] if type(origin) is int else origin,
            objects[target] if type(target) is int else target,
            objects[reads] if type(reads) is int else reads,
            objects[writes] if type(writes) is int else writes,
            Patch._from_parts(values, appends),
            attempt,
            started_at,
            finished_at,
            error,
            _unpack(info),
        )

    def _at(self, index: int) -> TransitionEvent:
        ends = self._ends
        return self._event(abs(ends[index - 1]) if index else 0, ends[index])

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> TransitionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[TransitionEvent]: ...

    def __getitem__(self, index: int | slice) -> TransitionEvent | list[TransitionEvent]:
        count = len(self._ends)
        if isinstance(index, slice):
            return [self._at(i) for i in range(*index.indices(count))]
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("event log index out of range")
        return self._at(index)

    def __iter__(self) -> Iterator[TransitionEvent]:
        start = 0
        for end in self._ends:
            yield self._event(start, end)
            start = abs(end)

    def __repr__(self) -> str:
        return f"<EventLog of {self.session_id!r}: {len(self._ends)} events>"


def _numberable(event: TransitionEvent) -> bool:
    """Whether the members ``event`` names read back as themselves from their numbers.

    A number in a row stands for an interned object, so an int stays out (a
    field set is numbered by value, so it is exactly a ``frozenset``: checked
    before).
    """
    named: tuple[object, ...] = (event.kind, event.from_state, event.to_state)
    return not any(type(item) is int for item in named)
