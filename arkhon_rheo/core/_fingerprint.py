"""A machine's fingerprint: what a stored session needs of the machine that reads it.

A session is stored with the fingerprint of the machine that started it: the
machine's name, its state type (the field names, in order, and a hash of the
fields' types and constraints), its lifecycle states and a hash of its
transitions. Loading the session with a machine whose fingerprint differs is a
configuration error, named as such, instead of a stored value that "does not
validate". Titles, descriptions and defaults are left out of the hash: they
change nothing in what a stored session holds.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import enum
    from collections.abc import Mapping

    from ..protocols import Machine

__all__ = ["differences", "fingerprint"]

#: JSON-schema keys that say nothing about the values a field accepts.
_COSMETIC = frozenset({"title", "description", "examples", "default"})


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _strip(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in schema.items() if k not in _COSMETIC}
    if isinstance(schema, list):
        return [_strip(item) for item in schema]
    return schema


def _label(state: enum.Enum) -> str:
    return state.name


def fingerprint(machine: Machine[Any]) -> dict[str, Any]:
    """The fingerprint of ``machine``, as JSON data.

    Returns:
        ``{"name", "state", "fields", "schema", "states", "transitions"}``.
    """
    state_type = machine.state_type
    try:
        schema: Any = _strip(state_type.model_json_schema())
    except Exception:  # a field type without a JSON schema: its annotation stands in
        schema = {
            name: repr(info.rebuild_annotation()) for name, info in state_type.model_fields.items()
        }
    transitions = sorted(
        [_label(src), sorted(_label(dst) for dst in dsts)]
        for src, dsts in machine.transitions.items()
    )
    return {
        "name": machine.name,
        "state": f"{state_type.__module__}.{state_type.__qualname__}",
        "fields": list(state_type.model_fields),
        "schema": _digest(schema),
        "states": sorted(_label(state) for state in machine.states),
        "transitions": _digest(transitions),
    }


def _listed(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a stored fingerprint and a machine's, in words (empty: none).

    The state type's own name is not compared: renaming or moving the class
    changes nothing in what a stored session holds.
    """
    found: list[str] = []
    if stored.get("name") != current["name"]:
        found.append(f"the name is {current['name']!r}, not {stored.get('name')!r}")
    old_fields, new_fields = list(stored.get("fields", ())), current["fields"]
    if old_fields != new_fields:
        missing = [name for name in old_fields if name not in new_fields]
        extra = [name for name in new_fields if name not in old_fields]
        if missing or extra:
            found.append(
                f"the state fields differ (the session has {_listed(missing)} that "
                f"{current['state']} lacks; {current['state']} adds {_listed(extra)})"
            )
        else:
            found.append("the state fields are in another order")
    elif stored.get("schema") != current["schema"]:
        found.append(
            f"the state fields' types or constraints differ (the session's state type is "
            f"{stored.get('state')}, this machine's {current['state']})"
        )
    old_states, new_states = list(stored.get("states", ())), current["states"]
    if old_states != new_states:
        missing = [name for name in old_states if name not in new_states]
        extra = [name for name in new_states if name not in old_states]
        found.append(
            f"the states differ (the session's machine has {_listed(missing)} that this one "
            f"lacks; this one adds {_listed(extra)})"
        )
    elif stored.get("transitions") != current["transitions"]:
        found.append("the transitions between the states differ")
    return found
