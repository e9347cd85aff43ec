"""Frozen models of one shape share one set of fields set; copies never change it."""

from __future__ import annotations

from pydantic import BaseModel

from arkhon_rheo.protocols import AssistantMessage, ModelReply, ToolCall, Usage
from arkhon_rheo.protocols._seams import share_fields_set


def reply(index: int) -> ModelReply:
    call = ToolCall(id=f"c{index}", name="lookup", arguments="{}")
    return ModelReply(message=AssistantMessage(tool_calls=(call,)), usage=Usage(prompt_tokens=1))


def test_frozen_models_of_one_shape_share_one_set_at_every_depth() -> None:
    first, second = reply(1), reply(2)
    assert first.message.tool_calls[0].__pydantic_fields_set__ is not (
        second.message.tool_calls[0].__pydantic_fields_set__
    )
    share_fields_set(first)
    share_fields_set(second)
    for a, b in (
        (first, second),
        (first.message, second.message),
        (first.message.tool_calls[0], second.message.tool_calls[0]),
        (first.usage, second.usage),
    ):
        assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
        assert a.model_fields_set == b.model_fields_set
    assert first == reply(1)  # equal as before: only the set's identity changed
    assert first.model_dump(exclude_unset=True) == reply(1).model_dump(exclude_unset=True)


def test_a_copy_with_changes_leaves_the_shared_set_as_it_was() -> None:
    one, two = Usage(prompt_tokens=1), Usage(prompt_tokens=2)
    share_fields_set(one)
    share_fields_set(two)
    shared = set(one.__pydantic_fields_set__)
    changed = one.model_copy(update={"completion_tokens": 5})
    assert changed.model_fields_set == shared | {"completion_tokens"}
    assert one.model_fields_set == shared == two.model_fields_set
    assert changed.__pydantic_fields_set__ is not one.__pydantic_fields_set__


def test_models_that_are_not_frozen_and_other_values_are_left_alone() -> None:
    class Loose(BaseModel):
        name: str = ""

    a, b = Loose(name="a"), Loose(name="b")
    share_fields_set(a)
    share_fields_set(b)
    share_fields_set("text")
    share_fields_set(None)
    assert a.__pydantic_fields_set__ is not b.__pydantic_fields_set__
    a.name = "changed"  # assignment adds to a's own set only
    assert b.model_fields_set == {"name"}
