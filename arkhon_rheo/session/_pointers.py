"""Recorded dumps an event log points at instead of keeping: the messages it holds already.

A stage's recorded calls (an event's ``info``) repeat what its patch appends: a
tool call's response is the `ToolMessage` the act stage appends, a model
call's response holds the `AssistantMessage` the think stage appends. `point`
finds those dumps (the very values of the message, of types that dump to
themselves, under its keys in its order) and leaves them out of the info the
log writes, noting where each message is; `restore` dumps the messages again
into the info read back, equal to what was recorded.
"""

from __future__ import annotations

import operator
from typing import Any

from ..protocols import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

__all__ = ["MESSAGES", "point", "restore"]

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
        and type(fields["content"]) in _PLAIN
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
        and _PLAIN.issuperset(map(type, fields.values()))
    )


#: The types of value that dump to themselves.
_PLAIN = frozenset({str, bool, type(None)})

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
