"""The patch validator's shortcuts give what the field's own validation gives, or refuse alike.

A value that validation could only give back as it is skips the adapter: a
number within its field's bounds, a tuple of exact items, an exact member of a
(discriminated) union. Each case here is checked against the field's
`TypeAdapter`: the same value kept, or `InvalidPatch` where it raises.
"""

from __future__ import annotations

import enum
import math
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from arkhon_rheo import AgentState, Lifecycle, Machine, Patch, StateView, stage
from arkhon_rheo.errors import InvalidPatch
from arkhon_rheo.protocols import AssistantMessage, History, Message, ToolCall, UserMessage
from arkhon_rheo.session._commit_rule import PatchValidator

L = Lifecycle


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = "busy"


class Note(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str


class Shortcuts(AgentState):
    count: int = Field(default=0, ge=0)
    ratio: float = Field(default=0.5, gt=0, le=1)
    calls: tuple[ToolCall, ...] = ()
    mood: Mood | None = None
    either: Note | Mood | None = None
    messages: History[Message] = History()
    tagged: Annotated[AssistantMessage | UserMessage, Field(discriminator="role")] = UserMessage(
        content="hi"
    )


WRITES = frozenset(Shortcuts.model_fields) - {"lifecycle", "iteration", "last_error", "session_id"}


def _validator() -> PatchValidator:
    @stage(reads=(), writes=set(WRITES), next=L.FINISHED, name="work")
    async def work(view: StateView[Shortcuts]) -> Patch:
        return Patch()

    machine = Machine(
        name="shortcuts",
        state_type=Shortcuts,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions={L.THINKING: {L.FINISHED}},
        stages={L.THINKING: work},
    )
    return PatchValidator(machine)


CALL = ToolCall(id="c1", name="look", arguments="{}")

CASES: list[tuple[str, Any]] = [
    ("count", 3),
    ("count", 0),
    ("count", -1),
    ("count", True),
    ("count", 2.0),
    ("count", "4"),
    ("ratio", 0.25),
    ("ratio", 1.0),
    ("ratio", 0.0),
    ("ratio", 1.5),
    ("ratio", math.nan),
    ("ratio", 1),
    ("calls", (CALL, CALL)),
    ("calls", ()),
    ("calls", [CALL]),
    ("calls", ({"id": "c2", "name": "look", "arguments": "{}"},)),
    ("calls", ("not a call",)),
    ("mood", Mood.BUSY),
    ("mood", None),
    ("mood", "calm"),
    ("mood", "angry"),
    ("either", Note(text="n")),
    ("either", Mood.CALM),
    ("either", {"text": "n"}),
    ("tagged", AssistantMessage(content="a")),
    ("tagged", UserMessage(content="u")),
    ("tagged", {"role": "user", "content": "u"}),
    ("tagged", {"role": "tool", "content": "u"}),
]


@pytest.mark.parametrize(("field", "value"), CASES)
def test_an_assigned_value_validates_as_its_field_does(field: str, value: Any) -> None:
    adapter = TypeAdapter(Shortcuts.model_fields[field].rebuild_annotation())
    try:
        expected = adapter.validate_python(value)
    except ValidationError:
        with pytest.raises(InvalidPatch):
            _validator().validate(
                Shortcuts(lifecycle=L.THINKING),
                Patch(**{field: value}),
                stage="work",
                writes=WRITES,
            )
        return
    updates, patch = _validator().validate(
        Shortcuts(lifecycle=L.THINKING), Patch(**{field: value}), stage="work", writes=WRITES
    )
    got = updates[field]
    assert got == expected or (got != got and expected != expected)
    assert type(got) is type(expected)
    assert patch.values[field] is got


def test_appended_messages_are_kept_as_they_are_and_refused_when_not_messages() -> None:
    ask = AssistantMessage(tool_calls=(CALL,))
    updates, patch = _validator().validate(
        Shortcuts(lifecycle=L.THINKING),
        Patch().append("messages", ask),
        stage="work",
        writes=WRITES,
    )
    assert updates["messages"][-1] is ask
    assert patch.appends["messages"] == (ask,)
    with pytest.raises(InvalidPatch):
        _validator().validate(
            Shortcuts(lifecycle=L.THINKING),
            Patch().append("messages", "not a message"),
            stage="work",
            writes=WRITES,
        )
