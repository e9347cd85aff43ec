"""`EventLog`: a session's events kept in memory as encoded rows.

A session without a store keeps its events in memory: they are its only
record. Kept as `TransitionEvent` objects, each event is two or three objects
the cyclic garbage collector tracks (the event, its patch, a dict or two), and
its recorded calls (``info``: nested dicts and lists, a few dozen objects a
step) many more; at thousands of sessions those objects are what its
collections walk, again and again, as the logs grow.

Here an event is one row: its fields, the plain values of its patch and its
``info`` written by `marshal` into one ``bytes`` (an object the collector never
tracks), with the enum members and field-name sets it names replaced by their
numbers in the machine's `Interner` and its session id left out (the log's).
The values that are objects already (a model appended to a `History`, a
string, a tuple) are not copied into the row: they follow it, in the log's one
flat list, so the log shares them with the state that holds them. A row is
read back, equal to the event appended, when the event is read.

A recorded call whose response is the very message the event appends (a tool
call's `ToolMessage`, the `AssistantMessage` of a model's reply, checked field
by field) is not kept twice: the row notes which of the event's values it is,
and reading the event dumps that message again, equal to what was recorded.

What `marshal` writes it reads back as equal data of the same types (dicts,
lists, tuples, sets, strings, numbers, booleans, None; a NaN reads back as a
NaN, which equals nothing); an ``info`` with anything else in it (or nested
too deep) follows the row as it is, and an event whose fields are not of the
types a row holds is kept whole.
"""

from __future__ import annotations

import marshal
import threading
from array import array
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from ..protocols import (
    AssistantMessage,
    Patch,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TransitionEvent,
    UserMessage,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["EventLog", "Interner"]

#: The most objects one machine's interner numbers; past it, rows keep the objects.
_INTERNED_MAX = 4096

#: The types of the patch values a row holds itself: nothing else holds them
#: (a state holds its own number), and `marshal` reads them back as they were.
_INLINE = frozenset({int, float, bool, type(None)})

#: The messages whose recorded dump a row may point at instead of keeping: their
#: fields are strings, booleans, None and tuples of `ToolCall`, which dump to themselves.
_MESSAGES = frozenset({AssistantMessage, ToolMessage, UserMessage, SystemMessage})

#: A row's flags: the event's error follows the row; its ``info`` does.
_ERROR, _INFO = 1, 2
#: The flag of the first patch value that follows the row (the next ones: its doubles).
_FIRST_VALUE = 4


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

        A field-name set or a tuple of names is numbered by its value (equal
        ones share a number); anything else by its identity.
        """
        key = item if type(item) is frozenset or type(item) is tuple else id(item)
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
        #: Each event's row, then the objects that follow it.
        self._data: list[Any] = []
        #: Where each event's slots end; negated for an event kept whole, in one slot.
        self._ends = array("q")

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
        ):
            self._keep(event)
            return
        interner = self._interner
        get = interner._index.get
        # The members and sets an event names are nearly always numbered already.
        numbers = (get(id(kind)), get(id(origin)), get(id(target)), get(reads), get(writes))
        if None in numbers:
            if not _numberable(event):
                self._keep(event)  # an int where a member belongs
                return
            numbers = tuple(map(interner.number, (kind, origin, target, reads, writes)))
        values, appends = patch._parts()
        data = self._data
        start = len(data)
        data.append(None)  # the row's slot
        flags = 0
        if error is not None:
            data.append(error)
            flags = _ERROR
        row: list[Any] = [
            seq,
            stage,
            *numbers,
            interner.number(tuple(values)) if values else (),
            interner.number((*appends, *map(len, appends.values()))) if appends else (),
            attempt,
            started_at,
            finished_at,
            0,
            None,
            (),
        ]
        bit = _FIRST_VALUE
        for value in values.values():
            if type(value) in _INLINE:
                row.append(value)
            else:
                data.append(value)
                flags |= bit
            bit += bit
        messages: list[tuple[int, Any]] | None = None
        for items in appends.values():
            for value in items:
                if type(value) in _INLINE:
                    row.append(value)
                else:
                    data.append(value)
                    flags |= bit
                    if type(value) in _MESSAGES:
                        if messages is None:
                            messages = []
                        messages.append((bit.bit_length() - 3, value))
                bit += bit
        self._seal(event, start, row, flags, info, messages)

    def _seal(
        self,
        event: TransitionEvent,
        start: int,
        row: list[Any],
        flags: int,
        info: Any,
        messages: list[tuple[int, Any]] | None,
    ) -> None:
        """Write ``row`` (with ``info``) into the row's slot at ``start``; end the event."""
        data = self._data
        if info is not None:
            if type(info) is dict:
                info, row[_AT_REFS] = _point(info, messages or [], self._earlier(start))
            row[_AT_INFO] = info
        row[_AT_FLAGS] = flags
        try:
            data[start] = marshal.dumps(row)
        except ValueError:  # an object marshal does not write, or nested too deep
            row[_AT_INFO], row[_AT_REFS], row[_AT_FLAGS] = None, (), flags | _INFO
            data.append(event.info)
            try:
                data[start] = marshal.dumps(row)
            except ValueError:  # a field of a type a row does not hold (a str subclass)
                del data[start:]
                self._keep(event)
                return
        self._ends.append(len(data))

    def _earlier(self, start: int) -> list[tuple[int, Any]]:
        """The messages of the two events before the one at ``start``: how far back, each."""
        ends = self._ends
        count = len(ends)
        since = abs(ends[count - 3]) if count > 2 else 0
        data = self._data
        return [(at - start, data[at]) for at in range(since, start) if type(data[at]) in _MESSAGES]

    def extend(self, events: Iterable[TransitionEvent]) -> None:
        """Keep ``events`` at the end, in order."""
        if (
            isinstance(events, EventLog)
            and events._interner is self._interner
            and events.session_id == self.session_id
        ):
            # The same rows: nothing decoded and encoded again.
            base = len(self._data)
            self._data += events._data
            self._ends.extend(end + base if end > 0 else end - base for end in events._ends)
            return
        for event in events:
            self.append(event)

    def clear(self) -> None:
        """Forget every event."""
        self._data.clear()
        del self._ends[:]

    def _event(self, start: int, end: int) -> TransitionEvent:
        data = self._data
        if end < 0:
            kept: TransitionEvent = data[start]
            return kept
        objects = self._interner.objects
        (
            seq,
            stage,
            kind,
            origin,
            target,
            reads,
            writes,
            assigned,
            appended,
            attempt,
            started_at,
            finished_at,
            flags,
            info,
            refs,
            *inline,
        ) = marshal.loads(data[start])
        at = start + 1
        error = None
        if flags & _ERROR:
            error = data[at]
            at += 1
        if type(assigned) is int:
            assigned = objects[assigned]
        if type(appended) is int:
            appended = objects[appended]
        half = len(appended) // 2
        flat: list[Any] = []
        taken = 0
        bit = _FIRST_VALUE
        for _ in range(len(assigned) + sum(appended[half:])):
            if flags & bit:
                flat.append(data[at])
                at += 1
            else:
                flat.append(inline[taken])
                taken += 1
            bit += bit
        if flags & _INFO:
            info = data[at]
        elif refs:
            _restore(info, refs, flat, data, start)
        values = dict(zip(assigned, flat, strict=False))
        appends: dict[str, tuple[Any, ...]] = {}
        at = len(assigned)
        for field, count in zip(appended[:half], appended[half:], strict=True):
            appends[field] = tuple(flat[at : at + count])
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


#: Where a row keeps its flags, its ``info`` and the responses its info points at.
_AT_FLAGS, _AT_INFO, _AT_REFS = 12, 13, 14


def _numberable(event: TransitionEvent) -> bool:
    """Whether the members ``event`` names read back as themselves from their numbers.

    A number in a row stands for an interned object, so an int stays out (a
    field set is numbered by value, so it is exactly a ``frozenset``: checked
    before).
    """
    named: tuple[object, ...] = (event.kind, event.from_state, event.to_state)
    return not any(type(item) is int for item in named)


def _point(
    info: dict[str, Any], own: list[tuple[int, Any]], earlier: list[tuple[int, Any]]
) -> tuple[dict[str, Any], tuple[tuple[int, tuple[str | int, ...], int], ...]]:
    """``info`` with the recorded data that is the dump of a message the log holds left out.

    A response (or its ``"message"``) may be the dump of one of ``own`` (the
    event's messages, by their place among its values); an item of a list in a
    request, the dump of one of ``own`` or ``earlier`` (the messages of the
    events before, by how far back they are in the log's slots, negated).

    Returns the info to write (a copy where anything was left out; ``info``
    itself is never changed) and, for each dump left out, ``(record, path,
    message)``: the record's place in ``info["io"]``, the keys and indexes
    that lead to the dump in it, and where the message is.
    """
    records = info.get("io")
    if type(records) is not list:
        return info, ()
    refs: list[tuple[int, tuple[str | int, ...], int]] = []
    copied: list[Any] | None = None
    for index, record in enumerate(records):
        if type(record) is not dict:
            continue
        found = len(refs)
        response = _point_response(record.get("response"), own, index, refs)
        request = _point_request(record.get("request"), [*own, *earlier], index, refs)
        if len(refs) > found:
            if copied is None:
                copied = list(records)
            copied[index] = {**record, "request": request, "response": response}
    if copied is None:
        return info, ()
    return {**info, "io": copied}, tuple(refs)


def _point_response(
    response: Any,
    own: list[tuple[int, Any]],
    index: int,
    refs: list[tuple[int, tuple[str | int, ...], int]],
) -> Any:
    """``response`` with the dump of one of ``own`` left out (see `_point`)."""
    if type(response) is not dict:
        return response
    inner = response.get("message")
    for place, message in own:
        if _dumps_to(message, response):
            refs.append((index, ("response",), place))
            return None
        if type(inner) is dict and _dumps_to(message, inner):
            refs.append((index, ("response", "message"), place))
            return {**response, "message": None}
    return response


def _point_request(
    request: Any,
    messages: list[tuple[int, Any]],
    index: int,
    refs: list[tuple[int, tuple[str | int, ...], int]],
) -> Any:
    """``request`` with the dumps of ``messages`` in its lists left out (see `_point`)."""
    if type(request) is not dict or not messages:
        return request
    changed: dict[str, Any] | None = None
    for key, value in request.items():
        if type(value) is not list:
            continue
        items: list[Any] | None = None
        for at, item in enumerate(value):
            if type(item) is not dict:
                continue
            for place, message in messages:
                if _dumps_to(message, item):
                    refs.append((index, ("request", key, at), place))
                    if items is None:
                        items = list(value)
                    items[at] = None
                    break
        if items is not None:
            if changed is None:
                changed = dict(request)
            changed[key] = items
    return request if changed is None else changed


def _dumps_to(model: Any, dumped: dict[str, Any]) -> bool:
    """Whether ``model`` (one of `_MESSAGES`, or a `ToolCall`) dumps to ``dumped``, as JSON.

    Their fields are strings, booleans and None, which dump to themselves, and
    tuples of tool calls, which dump to lists of their dumps.
    """
    fields: dict[str, Any] = model.__dict__
    if len(fields) != len(dumped):
        return False
    for (name, value), (key, other) in zip(fields.items(), dumped.items(), strict=True):
        if name != key:
            return False
        kind = type(value)
        if kind is str:
            if type(other) is not str or value != other:
                return False
        elif kind is bool or value is None:
            if value is not other:
                return False
        elif kind is tuple and type(other) is list and len(value) == len(other):
            for call, data in zip(value, other, strict=True):
                if type(call) is not ToolCall or type(data) is not dict:
                    return False
                if not _dumps_to(call, data):
                    return False
        else:
            return False
    return True


def _restore(
    info: dict[str, Any],
    refs: tuple[tuple[int, tuple[str | int, ...], int], ...],
    flat: list[Any],
    data: list[Any],
    start: int,
) -> None:
    """Put back, in ``info`` (a fresh copy), the dumps `_point` left out."""
    records = info["io"]
    for index, path, source in refs:
        message = flat[source] if source >= 0 else data[start + source]
        target = records[index]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = message.__pydantic_serializer__.to_python(message, mode="json")
