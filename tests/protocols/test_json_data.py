"""`json_data`: one walk makes plain data a copy; anything else goes through pydantic."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel

from arkhon_rheo.protocols._canonical import NotPlain, check_json, json_data, plain_copy


class Point(BaseModel):
    x: float
    tags: frozenset[str] = frozenset()


def test_plain_data_is_copied_in_one_walk() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": ({"c": "d"},), "e": {}}
    data = json_data(value)
    assert data == {"a": [1, 2.5, "x", None, True], "b": [{"c": "d"}], "e": {}}
    assert data is not value
    assert data["a"] is not value["a"]
    assert data["e"] is not value["e"]
    assert json_data(value, finite=True) == data


@pytest.mark.parametrize(
    "value",
    [
        {1: "a"},  # a key that is not a string
        [float("nan")],
        {"x": float("inf")},
        -math.inf,
        {"s": {"b", "a"}},
        Point(x=1.0),
        {"str subclass": type("S", (str,), {})("x")},
    ],
)
def test_plain_copy_refuses_what_is_not_plain(value: object) -> None:
    with pytest.raises(NotPlain):
        plain_copy(value)


def test_what_is_not_plain_goes_through_pydantic_sets_sorted() -> None:
    assert json_data({1: ("a",), "s": {"b", "a"}}) == {"1": ["a"], "s": ["a", "b"]}
    assert json_data(Point(x=1.5, tags=frozenset({"z", "y"}))) == {"x": 1.5, "tags": ["y", "z"]}


def test_nan_and_infinities_are_kept_unless_finite() -> None:
    data = json_data({"x": float("nan"), "y": [math.inf]})
    assert math.isnan(data["x"])
    assert data["y"] == [math.inf]
    for value in ({"x": float("nan")}, [1, -math.inf], Point(x=math.inf)):
        with pytest.raises(ValueError, match="not JSON compliant"):
            json_data(value, finite=True)
    with pytest.raises(ValueError, match="not JSON compliant"):
        check_json([math.nan])
