"""`EventLog`: a session's events kept in memory as encoded rows.

A session without a store keeps its events in memory: they are its only
record. Kept as `TransitionEvent` objects, each event is two or three objects
the cyclic garbage collector tracks (the event, its patch, a dict or two), and
its recorded calls (``info``: nested dicts and lists, a few dozen objects a
step) many more; at thousands of sessions those objects are what its
collections walk, again and again, as the logs grow.

Here an event is one row: its fields, the plain values of its patch and its
``info`` written by `marshal`, appended to the log's one ``bytearray`` of rows
(an object the collector never tracks; one buffer rather than a ``bytes`` per
event saves each row's object header, ~35 bytes an event), with the enum
members and field-name sets it names replaced by their numbers in the
machine's `Interner` and its session id left out (the log's).
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

**Packed info.** An event's ``info`` is written with its dicts' keys numbered.

Every step of a session records the same few shapes of call (a model call's
request and response, a tool call's): written as they are, the keys of each
dict (``"kind"``, ``"request"``, ``"response"``, ``"usage"``, ``"prompt_tokens"``
...) are about half of a row's bytes, the same in every row. `pack` writes a
dict as a tuple of its keys' number in the machine's `Interner` (the keys
themselves once the interner is full) and its values; `unpack` reads it back,
an equal dict with its keys in the same order.

Only JSON-shaped data is packed (dicts with string keys, lists, strings,
numbers, booleans, None): a tuple in it would read back as a dict, so an
``info`` with a tuple, set or any other object in it is written as it is.

**Pointers.** A log points at the recorded dumps it holds already instead of keeping them.

A stage's recorded calls (an event's ``info``) repeat what its patch appends: a
tool call's response is the `ToolMessage` the act stage appends, a model
call's response holds the `AssistantMessage` the think stage appends. `point`
finds those dumps (the very values of the message, of types that dump to
themselves, under its keys in its order) and leaves them out of the info the
log writes, noting where each message is; `restore` dumps the messages again
into the info read back, equal to what was recorded.
"""

from __future__ import annotations

import marshal
import operator
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
    from collections.abc import Callable, Iterable

    #: An interner's table (a tuple of keys to its number) and its numbering function.
    InternerTable = tuple[dict[object, int], Callable[[Any], Any]]

__all__ = ["MESSAGES", "EventLog", "Interner", "pack", "point", "restore", "unpack"]


#: The types written as they are.
_PLAIN = frozenset({str, int, float, bool, type(None)})


class _Unpackable(Exception):
    """Raised inside `pack` by a value it does not write (the info is written as it is)."""


def pack(info: dict[str, Any], interner: InternerTable) -> tuple[Any, ...] | None:
    """``info`` with each dict a tuple of its keys' number and its values; None if not JSON-shaped.

    Args:
        info: An event's ``info``.
        interner: The machine's interner's table and its ``number`` (a tuple of keys
            gets a number by value).
    """
    try:
        return _dict(info, interner)
    except (_Unpackable, RecursionError):
        return None


def _dict(data: dict[Any, Any], interner: InternerTable) -> tuple[Any, ...]:
    # Loops rather than a call per value: this runs at every commit that records a call.
    keys = tuple(data)
    found = interner[0].get(keys)
    if found is None:
        for key in keys:
            if type(key) is not str:
                raise _Unpackable
        found = interner[1](keys)
    return (found, *_list(data.values(), interner))


def _list(items: Iterable[Any], interner: InternerTable) -> list[Any]:
    out = []
    for value in items:
        kind = type(value)
        if kind in _PLAIN:
            out.append(value)
        elif kind is dict:
            out.append(_dict(value, interner))
        elif kind is list:
            out.append(_list(value, interner))
        else:
            raise _Unpackable
    return out


def unpack(packed: tuple[Any, ...], objects: list[Any]) -> dict[str, Any]:
    """The ``info`` `pack` wrote: fresh dicts and lists, equal to the ones packed.

    Args:
        packed: What `pack` returned.
        objects: The interner's objects (a key tuple's number is its place).
    """
    keys = packed[0]
    if type(keys) is int:
        keys = objects[keys]
    return {key: _read(value, objects) for key, value in zip(keys, packed[1:], strict=True)}


def _read(value: Any, objects: list[Any]) -> Any:
    kind = type(value)
    if kind is tuple:
        return unpack(value, objects)
    if kind is list:
        return [_read(item, objects) for item in value]
    return value


#: The messages whose recorded dump a log may point at instead of keeping: their
#: fields are strings, booleans, None and tuples of `ToolCall`, which dump to themselves.
MESSAGES = frozenset({AssistantMessage, ToolMessage, UserMessage, SystemMessage})

#: Where a dump left out is: the record's place in ``info["io"]``, ``""`` if it is
#: the record's response or the key in the response it is, and its message's place
#: after the event's row.
Ref = tuple[int, str, int]


def point(
    info: dict[str, Any], messages: list[tuple[int, Any]]
) -> tuple[dict[str, Any], tuple[Ref, ...]]:
    """``info`` with each recorded response that is the dump of one of ``messages`` left out.

    A response, or the ``"message"`` in it, may be the dump of one of
    ``messages`` (an event's messages, each with its place after the event's
    row). Returns the info to write (a copy where anything was left out;
    ``info`` itself is never changed) and, for each dump left out, a `Ref`.
    """
    records = info.get("io")
    if type(records) is not list:
        return info, ()
    refs: list[Ref] = []
    copied: list[Any] | None = None
    for index, record in enumerate(records):
        response = record.get("response") if type(record) is dict else None
        if type(response) is not dict:
            continue
        inner = response.get("message")
        for place, message in messages:
            if _dumps_to(message, response):
                refs.append((index, "", place))
                response = None
                break
            if type(inner) is dict and _dumps_to(message, inner):
                refs.append((index, "message", place))
                response = {**response, "message": None}
                break
        else:
            continue
        if copied is None:
            copied = list(records)
        copied[index] = {**record, "response": response}
    if copied is None:
        return info, ()
    return {**info, "io": copied}, tuple(refs)


def _dumps_to(model: Any, dumped: dict[str, Any]) -> bool:
    """Whether ``model`` (one of `MESSAGES`) dumps to ``dumped``, as JSON.

    Their fields are strings, booleans and None, which dump to themselves, and
    (an `AssistantMessage`'s calls) a tuple of `ToolCall`, which dumps to a list
    of their dumps. The check asks for the very objects the model holds (a
    model validated from a dump holds its strings), so it compares no text.
    """
    if type(model) is not AssistantMessage:
        return _same(model.__dict__, dumped)
    fields = model.__dict__
    calls = fields["tool_calls"]
    other = dumped.get("tool_calls")
    if not (
        tuple(dumped) == _ASSISTANT
        and dumped["role"] is fields["role"]
        and dumped["content"] is fields["content"]
        and type(fields["content"]) in _DUMPED_AS_IS
        and type(other) is list
        and len(other) == len(calls)
    ):
        return False
    for call, data in zip(calls, other, strict=True):
        if type(call) is not ToolCall or not _same(call.__dict__, data):
            return False
    return True


def _same(fields: dict[str, Any], dumped: Any) -> bool:
    """Whether ``dumped`` holds the very values of ``fields``, all plain, under the same keys."""
    return (
        type(dumped) is dict
        and len(fields) == len(dumped)
        and tuple(fields) == tuple(dumped)
        and all(map(operator.is_, fields.values(), dumped.values()))
        and _DUMPED_AS_IS.issuperset(map(type, fields.values()))
    )


#: The types of value that dump to themselves.
_DUMPED_AS_IS = frozenset({str, bool, type(None)})

#: An `AssistantMessage`'s fields, in order.
_ASSISTANT = ("role", "content", "tool_calls")


def restore(info: dict[str, Any], refs: tuple[Ref, ...], data: list[Any], start: int) -> None:
    """Put back, in ``info`` (a fresh copy), the dumps `point` left out.

    ``data`` holds the event's row at ``start``, its messages after it.
    """
    records = info["io"]
    for index, key, place in refs:
        message = data[start + place]
        dumped = message.__pydantic_serializer__.to_python(message, mode="json")
        if key:
            records[index]["response"][key] = dumped
        else:
            records[index]["response"] = dumped


#: The most objects one machine's interner numbers; past it, rows keep the objects.
_INTERNED_MAX = 4096

#: A row's flags: the event's error follows the row; its ``info`` follows its values;
#: its ``info`` is packed (`pack`: its dicts' keys numbered).
_ERROR, _INFO, _PACKED = 1, 2, 4


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

    __slots__ = ("_data", "_ends", "_interner", "_row_ends", "_rows", "session_id")

    def __init__(self, session_id: str, interner: Interner) -> None:
        self.session_id = session_id
        self._interner = interner
        #: Each event's row, then the objects that follow it.
        self._data: list[Any] = []
        #: Where each event's slots end; negated for an event kept whole, in one slot.
        self._ends = array("q")
        #: The events' rows, one after the other (an event kept whole has an empty one).
        self._rows = bytearray()
        #: Where each event's row ends in ``_rows``.
        self._row_ends = array("q")

    def _keep(self, event: TransitionEvent) -> None:
        """Keep ``event`` as it is (not this log's shape), in one slot."""
        self._data.append(event)
        self._ends.append(-len(self._data))
        self._row_ends.append(len(self._rows))

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
        data.append(None)  # the row's slot (the row itself is in ``_rows``)
        if error is not None:
            data.append(error)
        # The patch's values follow the row: the assigned ones, then the appended.
        data += values.values()
        messages: list[tuple[int, Any]] | None = None
        for items in appends.values():
            for item in items:
                if type(item) in MESSAGES:
                    if messages is None:
                        messages = []
                    messages.append((len(data) - start, item))
                data.append(item)
        written, refs, flags = self._written(info, messages)
        row: tuple[Any, ...] = (
            seq,
            stage,
            *numbers,
            interner.number(tuple(values)) if values else (),
            interner.number((*appends, *map(len, appends.values()))) if appends else (),
            attempt,
            started_at,
            finished_at,
            flags if error is None else flags | _ERROR,
            written,
            refs,
        )
        try:
            self._rows += marshal.dumps(row)
        except ValueError:  # an object marshal does not write; nested too deep
            self._info_after(event, start, row)
            return
        self._ends.append(len(data))
        self._row_ends.append(len(self._rows))

    def _written(
        self, info: Any, messages: list[tuple[int, Any]] | None
    ) -> tuple[Any, tuple[Ref, ...], int]:
        """What a row writes of ``info``, the `Ref` s of the messages it points at, its flags."""
        if type(info) is not dict:
            return info, (), 0
        refs: tuple[Ref, ...] = ()
        if messages is not None:
            info, refs = point(info, messages)
        interner = self._interner
        packed = pack(info, (interner._index, interner.number))
        if packed is None:
            return info, refs, 0
        return packed, refs, _PACKED

    def _info_after(self, event: TransitionEvent, start: int, row: tuple[Any, ...]) -> None:
        """Write ``row`` with the event's ``info`` after its values; else keep ``event`` whole."""
        data = self._data
        data.append(event.info)
        try:
            flags = (row[_AT_FLAGS] & ~_PACKED) | _INFO
            self._rows += marshal.dumps((*row[:_AT_FLAGS], flags, None, ()))
        except ValueError:  # a field of a type a row does not hold (a str subclass)
            del data[start:]
            self._keep(event)
            return
        self._ends.append(len(data))
        self._row_ends.append(len(self._rows))

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
            rows = len(self._rows)
            self._rows += events._rows
            self._row_ends.extend(end + rows for end in events._row_ends)
            return
        for event in events:
            self.append(event)

    def clear(self) -> None:
        """Forget every event."""
        self._data.clear()
        del self._ends[:]
        self._rows.clear()
        del self._row_ends[:]

    def _event(self, index: int, start: int, end: int) -> TransitionEvent:
        data = self._data
        if end < 0:
            kept: TransitionEvent = data[start]
            return kept
        row_ends = self._row_ends
        row = self._rows[row_ends[index - 1] if index else 0 : row_ends[index]]
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
        ) = marshal.loads(row)
        at = start + 1
        error = None
        if flags & _ERROR:
            error = data[at]
            at += 1
        if type(assigned) is int:
            assigned = objects[assigned]
        values = dict(zip(assigned, data[at : at + len(assigned)], strict=True))
        at += len(assigned)
        appends: dict[str, tuple[Any, ...]] = {}
        if appended:
            if type(appended) is int:
                appended = objects[appended]
            half = len(appended) // 2
            for field, count in zip(appended[:half], appended[half:], strict=True):
                appends[field] = tuple(data[at : at + count])
                at += count
        if flags & _INFO:
            info = data[at]
        else:
            if flags & _PACKED:
                info = unpack(info, objects)
            if refs:
                restore(info, refs, data, start)
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
        return self._event(index, abs(ends[index - 1]) if index else 0, ends[index])

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
        for index, end in enumerate(self._ends):
            yield self._event(index, start, end)
            start = abs(end)

    def __repr__(self) -> str:
        return f"<EventLog of {self.session_id!r}: {len(self._ends)} events>"


#: Where a row keeps its flags (then the event's ``info``, then its `Ref` s).
_AT_FLAGS = 12


def _numberable(event: TransitionEvent) -> bool:
    """Whether the members ``event`` names read back as themselves from their numbers.

    A number in a row stands for an interned object, so an int stays out (a
    field set is numbered by value, so it is exactly a ``frozenset``: checked
    before).
    """
    named: tuple[object, ...] = (event.kind, event.from_state, event.to_state)
    return not any(type(item) is int for item in named)
