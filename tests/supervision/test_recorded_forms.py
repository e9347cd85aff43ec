"""Recorded calls keep one form whichever way they are checked.

A request that is plain JSON data is copied in one walk, a response of a type
whose validation proves its dump is JSON is not encoded to be checked: the
records, the values the stage gets and the errors must be what the general
path (``json_data``, ``check_json``, validation) gives.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from arkhon_rheo import record_call
from arkhon_rheo.errors import UnrecordableCall
from arkhon_rheo.protocols import AssistantMessage, ModelReply, ToolCall, ToolMessage, Usage
from arkhon_rheo.protocols._io import _jsonable
from arkhon_rheo.protocols._seams import json_data
from arkhon_rheo.session._as_recorded import validation_checks_json
from arkhon_rheo.session._recording import CallRecorder


class _Label(str):
    """A str subclass: not plain JSON data of exactly its type."""


class _Scored(BaseModel):
    model_config = ConfigDict(frozen=True)
    score: float


class _Checked(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str

    @field_validator("name")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


class _Nested(BaseModel):
    model_config = ConfigDict(frozen=True)
    items: tuple[ToolCall, ...] = ()
    note: str | None = None
    kind: int = 0


@pytest.mark.parametrize(
    "request_data",
    [
        {"turn": 3, "new": [{"role": "tool", "content": "K", "is_error": False}], "x": None},
        {"values": (1, 2.5, [None, True]), "nested": {"a": {"b": ["c"]}}},
        {"label": _Label("a"), "n": 1},  # not plain: the general path
        {1: "a"},  # an int key: the general path makes it a string
        ["a", ("b",)],
    ],
)
def test_a_request_is_recorded_as_json_data_makes_it(request_data: Any) -> None:
    assert _jsonable("model", "request", request_data) == json_data(request_data)
    assert type(_jsonable("model", "request", request_data)) is type(json_data(request_data))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_request_with_a_float_that_is_not_json_is_refused(bad: float) -> None:
    with pytest.raises(UnrecordableCall, match="request"):
        _jsonable("model", "request", {"temperature": [bad]})


def test_the_types_whose_validation_checks_their_json() -> None:
    assert validation_checks_json(ModelReply)
    assert validation_checks_json(ToolMessage)
    assert validation_checks_json(_Nested)
    assert not validation_checks_json(_Scored)  # a float may be NaN
    assert not validation_checks_json(_Checked)  # a validator may let anything through
    assert not validation_checks_json(Any)
    assert not validation_checks_json(dict[str, Any])


def _reply() -> ModelReply:
    call = ToolCall(id="c1", name="lookup", arguments='{"key": "k"}')
    return ModelReply(
        message=AssistantMessage(tool_calls=(call,)),
        finish_reason="tool_calls",
        usage=Usage(prompt_tokens=3),
    )


@pytest.mark.anyio
async def test_a_reply_is_recorded_and_returned_as_a_replay_gives_it() -> None:
    reply = _reply()

    async def ask() -> ModelReply:
        return reply

    with CallRecorder() as recorder:
        got = await record_call("model", {"turn": 0}, ask, returns=ModelReply)
    (record,) = recorder.finished()
    assert record["response"] == reply.model_dump(mode="json")
    again = ModelReply.model_validate(record["response"])
    assert got == again == reply
    assert got.model_fields_set == again.model_fields_set == set(ModelReply.model_fields)
    assert got.message.model_fields_set == again.message.model_fields_set


@pytest.mark.anyio
async def test_a_response_that_is_not_json_is_refused_as_before() -> None:
    broken = ToolMessage.model_construct(tool_call_id="c", name="t", content=object())

    async def answer() -> ToolMessage:
        return broken

    with CallRecorder() as recorder, pytest.raises(UnrecordableCall, match="response"):
        await record_call("tool:t", {}, answer, returns=ToolMessage)
    assert "response" not in recorder.calls[0]


@pytest.mark.anyio
async def test_a_response_that_does_not_validate_is_recorded_then_fails_as_before() -> None:
    broken = ToolMessage.model_construct(tool_call_id="c", name="t", content=math.nan)

    async def answer() -> ToolMessage:
        return broken

    recorder = CallRecorder()
    with recorder, pytest.raises(ValidationError), pytest.warns(UserWarning, match="serializ"):
        await record_call("tool:t", {}, answer, returns=ToolMessage)
    assert recorder.finished()[0]["response"]["content"] is None  # pydantic dumps NaN so
