"""A machine's fingerprint, field by field: compatible changes pass, the others are named."""

from __future__ import annotations

import enum
from typing import Any, Literal, NamedTuple

import pytest
from pydantic import BaseModel, ConfigDict

from arkhon_rheo import (
    AgentState,
    ConfigurationError,
    FrozenMap,
    History,
    Lifecycle,
    Machine,
    Patch,
    StateView,
    stage,
)
from arkhon_rheo.core._fingerprint import (
    differences,
    fingerprint,
    legacy_schema,
    same_form,
    upgrade_hint,
)
from arkhon_rheo.protocols import Upgrade

L = Lifecycle


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Colour2(enum.Enum):
    RED = "red"
    BLUE = "blue"
    GREEN = "green"


class Inner(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: int
    b: str = "x"


class InnerMore(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: int
    b: str = "x"
    c: float = 0.0


class Pair(NamedTuple):
    cycle: int
    text: str


class Triple(NamedTuple):
    cycle: int
    text: str
    weight: float = 1.0


class InnerLess(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: int


def machine_of(
    fields: dict[str, Any],
    *,
    version: int = 1,
    upgrades: dict[int, Any] | None = None,
    loop: bool = False,
    with_observing: bool = False,
) -> Machine[Any]:
    """A one-stage machine named ``"m"`` over a state type with ``fields``."""
    namespace: dict[str, Any] = {"__annotations__": {"lifecycle": Lifecycle}}
    namespace["lifecycle"] = L.THINKING
    for name, (annotation, default) in fields.items():
        namespace["__annotations__"][name] = annotation
        if default is not ...:
            namespace[name] = default
    state_type = type("State", (AgentState,), namespace)

    @stage(next=L.FINISHED, name="go")
    async def go(view: StateView[Any]) -> Patch:
        return Patch()

    transitions: dict[Any, set[Any]] = {L.THINKING: {L.FINISHED}}
    stages: dict[Any, Any] = {L.THINKING: go}
    if loop:
        transitions[L.THINKING].add(L.THINKING)
    if with_observing:
        transitions[L.THINKING].add(L.OBSERVING)
        transitions[L.OBSERVING] = {L.FINISHED}
        stages[L.OBSERVING] = go
    return Machine(
        name="m",
        state_type=state_type,
        initial=L.THINKING,
        terminal={L.FINISHED, L.FAILED},
        failed=L.FAILED,
        transitions=transitions,
        stages=stages,
        version=version,
        upgrades=upgrades,
    )


def differ(old: Machine[Any], new: Machine[Any]) -> list[str]:
    return differences(
        fingerprint(old), fingerprint(new), legacy=lambda f: legacy_schema(new.state_type, f)
    )


COMPATIBLE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "a field added with a default": ({"n": (int, 0)}, {"n": (int, 0), "m": (str, "")}),
    "int to int | None": ({"n": (int, 0)}, {"n": (int | None, None)}),
    "str to str | None": ({"s": (str, "")}, {"s": (str | None, None)}),
    "int to float": ({"n": (int, 0)}, {"n": (float, 0.0)}),
    "a new Literal member": ({"k": (Literal["a", "b"], "a")}, {"k": (Literal["a", "b", "c"], "a")}),
    "a Literal to str": ({"k": (Literal["a", "b"], "a")}, {"k": (str, "a")}),
    "a new enum member": ({"c": (Colour, Colour.RED)}, {"c": (Colour2, Colour2.RED)}),
    "an item type widened": ({"t": (tuple[int, ...], ())}, {"t": (tuple[int | str, ...], ())}),
    "a nested field added with a default": (
        {"i": (Inner | None, None)},
        {"i": (InnerMore | None, None)},
    ),
    "an item's new field with a default": (
        {"h": (History[Pair], History())},
        {"h": (History[Triple], History())},
    ),
    "a map's values widened": (
        {"m": (FrozenMap[str, int], FrozenMap())},
        {"m": (FrozenMap[str, int | None], FrozenMap())},
    ),
    "fields in another order": ({"a": (int, 0), "b": (str, "")}, {"b": (str, ""), "a": (int, 0)}),
    "a set to a list-like tuple": (
        {"t": (frozenset[int], frozenset())},
        {"t": (tuple[int, ...], ())},
    ),
    "a default changed": ({"n": (int, 0)}, {"n": (int, 5)}),
}

INCOMPATIBLE: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "a field removed": (
        {"n": (int, 0), "gone": (str, "")},
        {"n": (int, 0)},
        "field 'gone' is gone",
    ),
    "a field added without a default": (
        {"n": (int, 0)},
        {"n": (int, 0), "m": (str, ...)},
        "field 'm' was added without a default",
    ),
    "int | None to int": (
        {"n": (int | None, None)},
        {"n": (int, 0)},
        "field 'n' changed type from int | None to int",
    ),
    "str to int": ({"s": (str, "")}, {"s": (int, 0)}, "field 's' changed type from str to int"),
    "a Literal member gone": (
        {"k": (Literal["a", "b"], "a")},
        {"k": (Literal["a"], "a")},
        "'b' no longer accepted",
    ),
    "an enum member gone": (
        {"c": (Colour2, Colour2.RED)},
        {"c": (Colour, Colour.RED)},
        "'green' no longer accepted",
    ),
    "a nested field removed": (
        {"i": (Inner | None, None)},
        {"i": (InnerLess | None, None)},
        "'b' is gone",
    ),
    "an item's field removed": (
        {"h": (History[Triple], History())},
        {"h": (History[Pair], History())},
        "maxItems 2 is new or stricter",
    ),
    "an item type narrowed": (
        {"h": (History[int | str], History())},
        {"h": (History[int], History())},
        "field 'h' changed type from History[int | str] to History[int]",
    ),
}


@pytest.mark.parametrize("change", list(COMPATIBLE))
def test_a_compatible_change_needs_no_upgrade(change: str) -> None:
    old, new = COMPATIBLE[change]
    before, after = machine_of(old), machine_of(new)
    assert not same_form(fingerprint(before), fingerprint(after)) or change == "a default changed"
    assert differ(before, after) == []


@pytest.mark.parametrize("change", list(INCOMPATIBLE))
def test_a_change_that_needs_an_upgrade_is_named(change: str) -> None:
    old, new, named = INCOMPATIBLE[change]
    found = differ(machine_of(old), machine_of(new))
    assert any(named in text for text in found), found


def test_new_states_and_transitions_are_compatible_and_a_state_gone_is_not() -> None:
    plain, more = machine_of({}), machine_of({}, loop=True, with_observing=True)
    assert differ(plain, more) == []
    (found,) = differ(more, plain)
    assert "state 'OBSERVING' of the session's machine are gone" in found
    # Declared with a version (an upgrade), a state gone is accepted: a session in it is
    # refused when it is loaded.
    later = machine_of({}, version=2, upgrades={1: Upgrade()})
    assert differ(more, later) == []


def test_an_upgrade_covers_renames_and_removals_and_is_checked_against_the_rest() -> None:
    old = machine_of({"score": (int, 0), "draft": (str, ""), "n": (int, 0)})
    new_fields = {"points": (int, 0), "n": (int, 0)}
    declared = machine_of(
        new_fields,
        version=2,
        upgrades={1: Upgrade(rename={"score": "points"}, remove=["draft"])},
    )
    assert differ(old, declared) == []
    partial = machine_of(new_fields, version=2, upgrades={1: Upgrade(rename={"score": "points"})})
    assert differ(old, partial) == ["field 'draft' is gone from State"]
    retyped = machine_of(
        {"points": (str, ""), "n": (int, 0)},
        version=2,
        upgrades={1: Upgrade(rename={"score": "points"}, remove=["draft"])},
    )
    (found,) = differ(old, retyped)
    assert found == "field 'score' (now 'points') changed type from int to str"
    # A reshape by a function is checked on each session's values, as it is loaded.
    reshaped = machine_of({"points": (str, "")}, version=2, upgrades={1: lambda values: values})
    assert differ(old, reshaped) == []


def test_versions_name_what_is_missing() -> None:
    one, two = machine_of({}), machine_of({}, version=2, upgrades={1: Upgrade()})
    three = machine_of({}, version=3, upgrades={2: Upgrade()})
    (found,) = differ(two, one)
    assert "a session is never read by an earlier version" in found
    (found,) = differ(one, three)
    assert "declares no upgrade from version 1" in found
    assert differ(two, three) == []


def test_the_hint_says_how_to_declare_the_change() -> None:
    old = machine_of({"score": (int, 0), "tags": (tuple[int, ...], ())})
    new = machine_of({"tags": (tuple[str, ...], ()), "m": (str, ...)})
    hint = upgrade_hint(fingerprint(old), fingerprint(new))
    assert "Machine(..., version=2, upgrades={1: Upgrade(remove=['score']" in hint
    assert "items={'<field>': a function of one stored item}" in hint
    assert "or give 'm' a default" in hint
    assert "rename={'score': 'its new name'} instead, if it was renamed" in hint
    assert "arkhon-rheo check --machine MODULE:ATTR" in hint


def test_a_digest_form_fingerprint_is_still_compared() -> None:
    """Fingerprints stored before fields were kept one by one: an added field, told apart."""
    old = machine_of({"n": (int, 0), "s": (str, "")})
    digest_form = {
        key: fingerprint(old)[key]
        for key in ("name", "state", "fields", "schema", "states", "transitions")
    }
    assert same_form(digest_form, fingerprint(old))
    added = machine_of({"n": (int, 0), "s": (str, ""), "m": (str, "")})
    assert differ_from(digest_form, added) == []
    retyped = machine_of({"n": (int, 0), "s": (int, 0)})
    (found,) = differ_from(digest_form, retyped)
    assert "the types of fields it shares with this machine differ" in found
    (found,) = differ_from(digest_form, machine_of({"n": (int, 0)}))
    assert found == "field 's' is gone from State"


def differ_from(stored: dict[str, Any], new: Machine[Any]) -> list[str]:
    return differences(stored, fingerprint(new), legacy=lambda f: legacy_schema(new.state_type, f))


def test_a_fingerprint_names_its_form_and_keeps_what_reads_it() -> None:
    machine = machine_of(
        {"h": (History[str], History()), "t": (frozenset[str], frozenset())},
        version=2,
        upgrades={1: Upgrade(rename={"x": "h"})},
    )
    data = fingerprint(machine)
    assert data["version"] == 2
    assert data["items"] == ["h"]
    assert data["lifecycle"]["THINKING"] == "Thinking"
    assert data["upgrades"] == {
        "1": {"rename": {"x": "h"}, "remove": [], "items": [], "values": False}
    }
    assert data["annotations"]["t"] == "frozenset[str]"
    # The form leaves out the class's name and what the upgrades declare.
    assert same_form(data, {**data, "state": "elsewhere.State", "upgrades": {}})
    assert not same_form(data, {**fingerprint(machine_of({})), "name": "m"})


def test_versions_and_upgrades_are_checked_when_the_machine_is_built() -> None:
    with pytest.raises(ConfigurationError, match="version must be a whole number from 1"):
        machine_of({}, version=0)
    with pytest.raises(ConfigurationError, match="keyed by the version they read, from 1 to 1"):
        machine_of({}, version=2, upgrades={2: Upgrade()})
    with pytest.raises(ConfigurationError, match=r"upgrades\[2\] is missing"):
        machine_of({}, version=4, upgrades={1: Upgrade(), 3: Upgrade()})
    with pytest.raises(ConfigurationError, match="which the state type of version 2 does not have"):
        machine_of({}, version=2, upgrades={1: Upgrade(rename={"a": "b"})})
    with pytest.raises(ConfigurationError, match="must be an Upgrade or a function"):
        machine_of({}, version=2, upgrades={1: "rename"})
    with pytest.raises(ConfigurationError, match="both renamed and removed"):
        Upgrade(rename={"a": "b"}, remove=["a"])
    assert machine_of({}, version=2, upgrades={1: lambda v: v}).upgrades[1].values is not None
