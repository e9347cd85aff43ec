"""Finding a user's machine and initial state by ``module:attr`` name, in any process."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ._machine import Machine
from ._state import AgentState

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["load_machine", "load_state_factory", "resolve"]


def resolve(spec: str, what: str) -> Any:
    """Import ``module:attr`` (the attribute may be dotted) and return the attribute.

    Raises:
        ConfigurationError: If ``spec`` is not ``module:attr``, or either is not found.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigurationError(
            f"the {what} must be named as 'module:attr' (for example 'myapp.agents:machine'), "
            f"got {spec!r}"
        )
    module_name, attr = spec.split(":")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"cannot import module {module_name!r} of the {what} {spec!r}: {exc}; "
            "it must be importable from a fresh process (on sys.path, not __main__)"
        ) from exc
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attr!r} (the {what} {spec!r})"
            ) from None
    return value


def load_machine(spec: str) -> Machine[Any]:
    """The `Machine` that ``spec`` names: the machine itself or a factory called with no argument.

    Raises:
        ConfigurationError: If it is neither.
    """
    value = resolve(spec, "machine")
    if callable(value) and not isinstance(value, Machine | type):
        try:
            value = value()
        except Exception as exc:
            raise ConfigurationError(f"{spec!r} failed to make a machine: {exc!r}") from exc
    if not isinstance(value, Machine):
        raise ConfigurationError(
            f"{spec!r} must name a Machine or a function returning one, got {value!r}"
        )
    return value


def load_state_factory(spec: str) -> Callable[[], AgentState]:
    """A function making a fresh initial state, from ``spec``: a callable taking no argument.

    Raises:
        ConfigurationError: If ``spec`` does not name a callable returning an `AgentState`.
    """
    value = resolve(spec, "initial state factory")
    if not callable(value):
        raise ConfigurationError(
            f"{spec!r} must name a function returning a fresh initial state, got {value!r}"
        )

    def make() -> AgentState:
        state = value()
        if not isinstance(state, AgentState):
            raise ConfigurationError(
                f"the initial state factory {spec!r} must return an AgentState, got {state!r}"
            )
        return state

    return make
