"""`EventLog`: a session's events kept in memory as rows the cyclic GC stops scanning.

A session without a store keeps its events in memory: they are its only
record. Kept as `TransitionEvent` objects, each event is two or three objects
the cyclic garbage collector tracks (the event, its patch, a dict or two), and
at thousands of sessions those objects are what its full collections walk, again
and again, as the logs grow. Here each event is one plain tuple instead: the
enum members and field-name sets it names are replaced by their numbers in the
machine's `Interner`, its patch by the patch's own dicts, its session id left
out (the log's), the patch's field names kept as tuples of strings and its
values spliced onto the end of the row itself. A tuple whose items are all
plain data (strings, numbers, ``None``, such tuples) is untracked by the
collector the first time it looks at it, so most events cost the collector
nothing from then on, and an event that holds a tracked value (a model
appended to a `History`, say) stays one tracked object, not three. An event
is rebuilt, equal to the one appended, when it is read.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, overload

from ..protocols import Patch, TransitionEvent

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["EventLog", "Interner"]

#: The most objects one machine's interner numbers; past it, rows keep the objects.
_INTERNED_MAX = 4096

#: Where a row's patch values start: after the event's 14 fields.
_TAIL = 14


class Interner:
    """Numbers for the few long-lived objects events name: states, kinds, field sets.

    The objects are kept (their ``id`` stays theirs), one list per machine, so
    they live as long as the machine does.
    """

    __slots__ = ("_index", "_lock", "objects")

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self._index: dict[object, int] = {}
        self._lock = threading.Lock()

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

    __slots__ = ("_interner", "_rows", "session_id")

    def __init__(self, session_id: str, interner: Interner) -> None:
        self.session_id = session_id
        self._interner = interner
        self._rows: list[tuple[Any, ...] | TransitionEvent] = []

    def append(self, event: TransitionEvent) -> None:
        """Keep ``event`` at the end."""
        if type(event) is not TransitionEvent:
            self._rows.append(event)  # not this log's shape: kept as it is
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
        ):
            self._rows.append(event)  # not this log's shape: kept as it is
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
                self._rows.append(event)  # an int where a member belongs: kept as it is
                return
            number = interner.number
            kind_number, origin_number, target_number = number(kind), number(origin), number(target)
            reads_number, writes_number = number(reads), number(writes)
        values, appends = patch._parts()
        # A dict is never untracked, and a tuple holding a tracked value is one
        # more object the collector walks: the patch's names go in tuples of
        # strings (the assigned fields; the appended fields, then their counts),
        # its values at the end of the row, the assigned ones first.
        head = (
            seq,
            kind_number,
            stage,
            origin_number,
            target_number,
            reads_number,
            writes_number,
            tuple(values) if values else (),
            (*appends, *map(len, appends.values())) if appends else (),
            attempt,
            started_at,
            finished_at,
            error,
            info,
        )
        if appends:
            if values:
                self._rows.append((*head, *values.values(), *chain.from_iterable(appends.values())))
            elif len(appends) == 1:
                (items,) = appends.values()
                self._rows.append((*head, *items))
            else:
                self._rows.append((*head, *chain.from_iterable(appends.values())))
        elif values:
            self._rows.append((*head, *values.values()))
        else:
            self._rows.append(head)

    def extend(self, events: Iterable[TransitionEvent]) -> None:
        """Keep ``events`` at the end, in order."""
        if (
            isinstance(events, EventLog)
            and events._interner is self._interner
            and events.session_id == self.session_id
        ):
            self._rows.extend(events._rows)  # the same rows: nothing decoded
            return
        for event in events:
            self.append(event)

    def clear(self) -> None:
        """Forget every event."""
        self._rows.clear()

    def _event(self, row: tuple[Any, ...] | TransitionEvent) -> TransitionEvent:
        if isinstance(row, TransitionEvent):
            return row
        objects = self._interner.objects
        (seq, kind, stage, origin, target, reads, writes, assigned, appended) = row[: _TAIL - 5]
        attempt, started_at, finished_at, error, info = row[_TAIL - 5 : _TAIL]
        values = dict(zip(assigned, row[_TAIL : _TAIL + len(assigned)], strict=True))
        appends: dict[str, tuple[Any, ...]] = {}
        if appended:
            half = len(appended) // 2
            at = _TAIL + len(assigned)
            for field, count in zip(appended[:half], appended[half:], strict=True):
                appends[field] = row[at : at + count]
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
            info,
        )

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> TransitionEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[TransitionEvent]: ...

    def __getitem__(self, index: int | slice) -> TransitionEvent | list[TransitionEvent]:
        if isinstance(index, slice):
            return [self._event(row) for row in self._rows[index]]
        return self._event(self._rows[index])

    def __iter__(self) -> Iterator[TransitionEvent]:
        for row in self._rows:
            yield self._event(row)

    def __repr__(self) -> str:
        return f"<EventLog of {self.session_id!r}: {len(self._rows)} events>"


def _numberable(event: TransitionEvent) -> bool:
    """Whether the members ``event`` names read back as themselves from their numbers.

    A number in a row stands for an interned object, so an int stays out (a
    field set is numbered by value, so it is exactly a ``frozenset``: checked
    before).
    """
    named: tuple[object, ...] = (event.kind, event.from_state, event.to_state)
    return not any(type(item) is int for item in named)
