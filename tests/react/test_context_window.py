"""`ContextWindow`: the think stage's incremental `trim_messages`, message by message the same."""

from __future__ import annotations

import json

import pytest

from arkhon_rheo.protocols import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from arkhon_rheo.react import trim_messages
from arkhon_rheo.react._context import ContextWindow


def turn(index: int, size: int) -> list[Message]:
    call = ToolCall(id=f"c{index}", name="look", arguments=json.dumps({"key": index}))
    return [
        AssistantMessage(tool_calls=(call,)),
        ToolMessage(tool_call_id=f"c{index}", name="look", content="r" * size),
    ]


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [SystemMessage(content="rules"), UserMessage(content="task")]
    for index in range(turns):
        messages.extend(turn(index, 40 * (index % 5)))
        if index % 7 == 3:
            messages.append(UserMessage(content="and more " * index))
    return messages


@pytest.mark.parametrize("budget", [None, 1, 30, 200, 1_000, 10**6])
def test_a_growing_conversation_trims_as_trim_messages_does(budget: int | None) -> None:
    window = ContextWindow()
    messages = conversation(40)
    for end in range(1, len(messages) + 1):
        grown = tuple(messages[:end])
        assert window.trim(grown, budget) == trim_messages(grown, budget), (end, budget)


def test_an_edited_or_shorter_conversation_is_estimated_again_from_where_it_differs() -> None:
    window = ContextWindow()
    messages = conversation(20)
    assert window.trim(tuple(messages), 150) == trim_messages(messages, 150)
    edited = list(messages)
    edited[5] = UserMessage(content="x" * 4_000)  # a human's edit far back: now it cannot fit
    assert window.trim(tuple(edited), 150) == trim_messages(edited, 150)
    assert UserMessage(content="x" * 4_000) not in window.trim(tuple(edited), 150)
    shorter = tuple(messages[:9])
    assert window.trim(shorter, 10**6) == shorter
    assert window.trim(shorter, 60) == trim_messages(shorter, 60)


def test_trimming_keeps_leading_tool_results_with_their_turn() -> None:
    orphan = ToolMessage(tool_call_id="c0", name="look", content="r" * 100)
    messages = (SystemMessage(content="s"), orphan, orphan, UserMessage(content="u"))
    assert trim_messages(messages, 10**6) == messages
    assert trim_messages(messages, 20) == (messages[0], messages[3])
    assert ContextWindow().trim(messages, 20) == (messages[0], messages[3])
