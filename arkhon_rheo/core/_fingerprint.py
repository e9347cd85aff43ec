"""A machine's fingerprint: what a stored session needs of the machine that reads it.

A session is stored with the fingerprint of the machine that started it: the
machine's name and version, its state type field by field (each field's JSON
schema, whether it has a default, whether its digest is chained item by
item), its lifecycle states (and their stored values), its transitions and
loop state, and what its upgrades declare. ``form`` names the stored form the
rest describes: two machines of one form read each other's sessions as they
are. Titles, descriptions and defaults are left out: they change nothing in
what a stored session holds.

Reading a session with a machine of another form is checked field by field
(`differences`): a change every stored value survives (a field added with a
default, a type that accepts more, a new state or transition) is compatible;
any other must be covered by the machine's upgrades, or it is a configuration
error naming each field, type and state that differs. Fingerprints stored
before this form (``schema``: one digest of every field's types) are still
read: unchanged, they match as they always did.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TYPE_CHECKING, Any, NamedTuple

from .._errors import StoreCorrupt
from ._schemas import accepts, item_type, state_schema, type_name

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable, Mapping

    from ..protocols import AgentState, Machine

__all__ = [
    "Reading",
    "checked_fingerprint",
    "differences",
    "fingerprint",
    "legacy_schema",
    "reading",
    "same_form",
    "upgrade_hint",
    "version_of",
]

#: JSON-schema keys the digest form of fingerprints left out (everywhere).
_COSMETIC = frozenset({"title", "description", "examples", "default"})
#: What `fingerprint` adds to the digest form; its ``form`` is a digest of them.
FORMAT = 2
#: Keys of a fingerprint that do not name its form (what it reads, how it is shown).
_NOT_FORM = frozenset({"state", "form", "upgrades", "annotations"})


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


def _legacy_data(state_type: type[AgentState]) -> Any:
    try:
        return _strip(state_type.model_json_schema())
    except Exception:  # a field type without a JSON schema: its annotation stands in
        return {
            name: repr(info.rebuild_annotation()) for name, info in state_type.model_fields.items()
        }


def legacy_schema(state_type: type[AgentState], fields: Iterable[str] | None = None) -> str:
    """The digest of ``state_type``'s fields' types as fingerprints before `FORMAT` 2 kept it.

    With ``fields``, of those fields only (as a state type of just them would
    have had): what a stored digest is compared with when fields were added since.
    """
    data = _legacy_data(state_type)
    if fields is not None and isinstance(data, dict) and "properties" in data:
        keep = set(fields)
        data = dict(data)
        data["properties"] = {k: v for k, v in data["properties"].items() if k in keep}
        if "required" in data:
            data["required"] = [name for name in data["required"] if name in keep]
        if "$defs" in data:
            data["$defs"] = _referenced(data)
            if not data["$defs"]:
                del data["$defs"]
    elif fields is not None and isinstance(data, dict):
        keep = set(fields)
        data = {k: v for k, v in data.items() if k in keep}
    return _digest(data)


def _referenced(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The definitions ``schema`` (its properties) refers to, directly or through others."""
    defs: Mapping[str, Any] = schema["$defs"]
    found: dict[str, Any] = {}
    pending = [schema.get("properties", {})]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name in defs and name not in found:
                    found[name] = defs[name]
                    pending.append(defs[name])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return {name: defs[name] for name in defs if name in found}


def fingerprint(machine: Machine[Any]) -> dict[str, Any]:
    """The fingerprint of ``machine``, as JSON data.

    Returns:
        The digest form's keys (``name``, ``state``, ``fields``, ``schema``,
        ``states``, ``transitions``) and `FORMAT` 2's: ``format``, ``version``,
        ``types`` and ``defs`` (each field's JSON schema), ``optional`` (fields
        with a default), ``items`` (fields digested item by item),
        ``lifecycle`` (each state's stored value), ``edges``, ``loop``, then
        ``form`` (a digest of all but ``state``, ``upgrades``, ``annotations``),
        ``upgrades`` (what each declares) and ``annotations`` (each field's type).
    """
    state_type = machine.state_type
    fields = state_type.model_fields
    transitions = sorted(
        [_label(src), sorted(_label(dst) for dst in dsts)]
        for src, dsts in machine.transitions.items()
    )
    edges = {
        _label(src): sorted(_label(dst) for dst in dsts)
        for src, dsts in machine.transitions.items()
    }
    types, defs = state_schema(state_type)
    data: dict[str, Any] = {
        "name": machine.name,
        "state": f"{state_type.__module__}.{state_type.__qualname__}",
        "fields": list(fields),
        "schema": _digest(_legacy_data(state_type)),
        "states": sorted(_label(state) for state in machine.states),
        "transitions": _digest(transitions),
        "format": FORMAT,
        "version": machine.version,
        "types": types,
        "defs": defs,
        "optional": [name for name, info in fields.items() if not info.is_required()],
        "items": [name for name, info in fields.items() if item_type(info.annotation) is not None],
        "lifecycle": {
            state.name: _stored_value(state)
            for state in sorted(machine.states, key=lambda s: s.name)
        },
        "edges": dict(sorted(edges.items())),
        "loop": None if machine.loop_state is None else machine.loop_state.name,
    }
    data["form"] = _digest({k: v for k, v in data.items() if k not in _NOT_FORM})
    data["upgrades"] = {str(v): upgrade.describe() for v, upgrade in machine.upgrades.items()}
    data["annotations"] = {
        name: type_name(info.rebuild_annotation()) for name, info in fields.items()
    }
    return data


def _stored_value(state: enum.Enum) -> Any:
    value = state.value
    return value if isinstance(value, (str, int, float, bool)) or value is None else repr(value)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _objects(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(item, dict) for item in value.values())


#: What each key of a fingerprint holds, checked on a stored one (`checked_fingerprint`).
_SHAPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "name": ("a string", lambda v: isinstance(v, str)),
    "state": ("a string", lambda v: isinstance(v, str)),
    "fields": ("a list of names", _strings),
    "schema": ("a string", lambda v: isinstance(v, str)),
    "states": ("a list of names", _strings),
    "transitions": ("a string", lambda v: isinstance(v, str)),
    "format": ("a number", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "version": (
        "a version number (1 or more)",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    ),
    "types": ("an object of JSON schemas", _objects),
    "defs": ("an object of JSON schemas", _objects),
    "optional": ("a list of names", _strings),
    "items": ("a list of names", _strings),
    "lifecycle": ("an object", lambda v: isinstance(v, dict)),
    "edges": ("an object", lambda v: isinstance(v, dict)),
    "loop": ("a name or null", lambda v: v is None or isinstance(v, str)),
    "form": ("a string", lambda v: isinstance(v, str)),
    "upgrades": ("an object of upgrades", _objects),
    "annotations": ("an object", lambda v: isinstance(v, dict)),
}
#: How a JSON value that is not an object is named.
_JSON_KINDS = {
    list: "a JSON array",
    str: "a JSON string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}
#: Keys only a fingerprint with a ``form`` has (the digest form had none of them).
_FORM_ONLY = ("format", "version", "types", "defs", "optional", "items", "lifecycle", "edges")


def checked_fingerprint(session_id: str, stored: Any) -> Mapping[str, Any] | None:
    """``stored``, the fingerprint session ``session_id`` was stored with, checked for damage.

    A fingerprint is a JSON object whose keys hold what `fingerprint` puts
    there; one with the keys of `FORMAT` 2 names its ``form`` (the digest form
    had none of them). ``None`` (a session stored before fingerprints) passes.

    Raises:
        StoreCorrupt: It is not of a fingerprint's shape, naming the session.
    """
    if stored is None:
        return None
    problem = None
    if not isinstance(stored, dict):
        problem = f"is {_JSON_KINDS.get(type(stored), 'a JSON value')}, not an object"
    else:
        for key, (what, fits) in _SHAPES.items():
            if key in stored and not fits(stored[key]):
                problem = f"has {key!r} of {stored[key]!r:.60}, not {what}"
                break
        else:
            extra = [key for key in _FORM_ONLY if key in stored]
            if extra and "form" not in stored:
                has = f"version {stored['version']}" if "version" in stored else _listed(extra)
                problem = f"names {has} but has no 'form' (which says what it describes)"
    if problem is None:
        checked: Mapping[str, Any] = stored
        return checked
    raise StoreCorrupt(
        f"session {session_id!r} is damaged in the store: the machine fingerprint it was "
        f"stored with {problem}. Restore the store from a backup, or delete the session; "
        "the store's other sessions read as before",
        session_id=session_id,
    )


def version_of(stored: Mapping[str, Any] | None) -> int:
    """The machine version a stored fingerprint names (1 for one that names none)."""
    version = stored.get("version", 1) if isinstance(stored, dict) else 1
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


def same_form(stored: Mapping[str, Any] | None, current: Mapping[str, Any]) -> bool:
    """Whether a session stored under fingerprint ``stored`` is read by ``current`` as it is.

    A fingerprint of the digest form is of the same form when its every key
    matches and the current machine is version 1; ``None`` (a session stored
    before fingerprints) is taken to be.
    """
    if stored is None:
        return True
    if "form" in stored:
        return bool(stored["form"] == current["form"])
    return current.get("version", 1) == 1 and all(
        stored.get(key) == current[key]
        for key in ("name", "fields", "schema", "states", "transitions")
    )


class Reading(NamedTuple):
    """How a machine reads a session stored under a fingerprint (see `reading`)."""

    #: The stored fingerprint, checked (``None``: a session stored before fingerprints).
    stored: Mapping[str, Any] | None
    #: The machine version it names (1 for one that names none).
    version: int
    #: Whether the machine reads the session as it is stored (`same_form`).
    same: bool
    #: What keeps the machine from reading it, in words (empty: nothing; see `differences`).
    found: list[str]
    #: How to declare what changed (`upgrade_hint`), when something is found of its own name.
    hint: str


def reading(
    session_id: str,
    stored: Any,
    current: Mapping[str, Any],
    state_type: type[AgentState] | None = None,
) -> Reading:
    """How the machine of fingerprint ``current`` reads a session stored under ``stored``.

    The one question a stored session's readers ask (the journal as it loads
    it, ``arkhon-rheo check`` before a deploy, ``show`` and the inspector
    given a machine): the fingerprint checked for damage, its version, whether
    it is read as it is, what keeps it from being read and how to declare it.

    Args:
        session_id: The session (named in a damage report).
        stored: Its stored fingerprint, as the store gave it.
        current: The reading machine's fingerprint.
        state_type: The reading machine's state type: tells, in a fingerprint
            of the digest form, a field added from a field retyped
            (`legacy_schema`); without it, any such change is found.

    Raises:
        StoreCorrupt: The stored fingerprint is damaged: not of a
            fingerprint's shape, or JSON schemas that do not read.
    """
    checked = checked_fingerprint(session_id, stored)
    if checked is None:
        return Reading(None, 1, True, [], "")
    version = version_of(checked)
    if same_form(checked, current):
        return Reading(checked, version, True, [], "")
    legacy = None if state_type is None else functools.partial(legacy_schema, state_type)
    try:
        found = differences(checked, current, legacy=legacy)
        named = checked.get("name") == current["name"]
        hint = upgrade_hint(checked, current) if found and named else ""
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        # A fingerprint of the right keys whose JSON schemas are not of their shape.
        raise StoreCorrupt(
            f"session {session_id!r} is damaged in the store: the machine fingerprint it "
            f"was stored with does not read ({type(exc).__name__}: {exc}). Restore the "
            "store from a backup, or delete the session",
            session_id=session_id,
        ) from exc
    return Reading(checked, version, False, found, hint)


# -- what differs -----------------------------------------------------------------------


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(name) for name in names)


def _chain(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]] | str:
    """The upgrades from the stored version to the current one, or why there are none."""
    old, new = version_of(stored), version_of(current)
    if old > new:
        return f"it is of version {old}: a session is never read by an earlier version"
    declared = current.get("upgrades", {})
    chain = []
    for version in range(old, new):
        step = declared.get(str(version))
        if step is None:
            return (
                f"the session is of version {old} and this machine, version {new}, declares no "
                f"upgrade from version {version} (upgrades={{{version}: Upgrade(...)}})"
            )
        chain.append(step)
    return chain


def _mapping(fields: Iterable[str], chain: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each stored field's name after the chain's renames (``None``: removed by it)."""
    found: dict[str, str | None] = {}
    for name in fields:
        current: str | None = name
        for step in chain:
            if current is None:
                break
            current = None if current in step["remove"] else step["rename"].get(current, current)
        found[name] = current
    return found


def differences(
    stored: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    legacy: Callable[[Iterable[str]], str] | None = None,
) -> list[str]:
    """What keeps a session of ``stored`` from being read by ``current``, in words (empty: none).

    Compatible changes are not listed; nor is what the current machine's
    upgrades from the stored version declare they handle (a reshape by a
    function is checked on each session's values as it is loaded). The state
    type's own name is not compared: renaming or moving the class changes
    nothing in what a stored session holds.

    Args:
        stored: The session's fingerprint.
        current: The reading machine's.
        legacy: For a fingerprint of the digest form, the digest of the current
            state type's fields restricted to some (`legacy_schema`): tells a
            field added from a field retyped. Without it, any such change is listed.
    """
    if stored.get("name") != current["name"]:
        return [f"the session's machine is {stored.get('name')!r}"]
    if same_form(stored, current):
        return []
    chain = _chain(stored, current)
    if isinstance(chain, str):
        return [chain]
    found = _state_changes(stored, current, upgraded=bool(chain))
    if any(step["values"] for step in chain):
        return found  # a reshape by code: each session's values are checked when loaded
    mapping = _mapping(stored.get("fields", ()), chain)
    if "types" in stored:
        found += _field_changes(stored, current, mapping, chain)
    else:
        found += _legacy_field_changes(stored, current, mapping, legacy)
    return found


def _state_changes(
    stored: Mapping[str, Any], current: Mapping[str, Any], *, upgraded: bool
) -> list[str]:
    gone = [name for name in stored.get("states", ()) if name not in current["states"]]
    if not gone or upgraded:
        return []  # with an upgrade, a session that uses a state gone is refused when loaded
    return [
        f"state{'s' if len(gone) > 1 else ''} {_listed(gone)} of the session's machine "
        "are gone (a session in one, or that went through one, could not be read)"
    ]


def _added(current: Mapping[str, Any], mapping: Mapping[str, str | None]) -> list[str]:
    kept = set(mapping.values())
    optional = set(current.get("optional", ()))
    return [
        f"field {name!r} was added without a default"
        for name in current["fields"]
        if name not in kept and name not in optional
    ]


def _removed(current: Mapping[str, Any], mapping: Mapping[str, str | None]) -> list[str]:
    found = []
    for old, new in mapping.items():
        if new is None or new in current["fields"]:
            continue
        renamed = f" (renamed {new!r} by an upgrade)" if new != old else ""
        found.append(f"field {old!r}{renamed} is gone from {_state(current)}")
    return found


def _state(current: Mapping[str, Any]) -> str:
    return str(current.get("state", "the state type")).rsplit(".", 1)[-1]


def _field_changes(
    stored: Mapping[str, Any],
    current: Mapping[str, Any],
    mapping: Mapping[str, str | None],
    chain: list[dict[str, Any]],
) -> list[str]:
    found = _removed(current, mapping)
    converted = {name for step in chain for name in step["items"]}
    old_types, new_types = stored["types"], current["types"]
    old_names, new_names = stored.get("annotations", {}), current.get("annotations", {})
    for old, new in mapping.items():
        if new is None or new not in new_types or old == "lifecycle" or new in converted:
            continue
        reason = accepts(
            old_types.get(old, {}), new_types[new], stored.get("defs", {}), current["defs"]
        )
        if reason is None:
            continue
        before = old_names.get(old) or _shown(old_types.get(old))
        after = new_names.get(new) or _shown(new_types[new])
        detail = "" if reason == "the types differ" else f": {reason}"
        name = repr(new) if new == old else f"{old!r} (now {new!r})"
        found.append(f"field {name} changed type from {before} to {after}{detail}")
    return found + _added(current, mapping)


def _shown(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True)


def _legacy_field_changes(
    stored: Mapping[str, Any],
    current: Mapping[str, Any],
    mapping: Mapping[str, str | None],
    legacy: Callable[[Iterable[str]], str] | None,
) -> list[str]:
    found = _removed(current, mapping)
    kept = [new for new in mapping.values() if new is not None and new in current["fields"]]
    renamed = any(old != new for old, new in mapping.items() if new is not None)
    if not found and not renamed and (legacy is None or legacy(kept) != stored.get("schema")):
        found.append(
            "the types of fields it shares with this machine differ (the session was stored "
            "with a fingerprint that does not tell which)"
        )
    return found + _added(current, mapping)


def upgrade_hint(stored: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """How to declare what changed since ``stored`` so that ``current`` reads its sessions."""
    old, new = version_of(stored), version_of(current)
    if old > new:
        return f"Read it with version {old} of the machine (or a later one)"
    chain = _chain(stored, current)
    mapping = _mapping(stored.get("fields", ()), chain if isinstance(chain, list) else [])
    fields = current["fields"]
    gone = sorted(name for name, now in mapping.items() if now and now not in fields)
    kept = set(mapping.values())
    optional = set(current.get("optional", ()))
    added = [name for name in fields if name not in kept and name not in optional]
    parts, notes = [], []
    if gone:
        parts.append(f"remove={gone!r}")
        notes.append(f"rename={{{gone[0]!r}: 'its new name'}} instead, if it was renamed")
    retyped = _retyped(stored, current, mapping) if "types" in stored else []
    sequences = set(stored.get("items", ()))
    if [name for name in retyped if name in sequences]:
        parts.append("items={'<field>': a function of one stored item}")
    if [name for name in retyped if name not in sequences] or added:
        parts.append("values=<a function of the stored field values>")
    if added:
        notes.insert(0, f"or give {_listed(added)} a default")
    declared = ", ".join(parts) or "values=<a function of the stored field values>"
    if old == new:
        how = f"Machine(..., version={new + 1}, upgrades={{{old}: Upgrade({declared})}})"
    else:
        how = f"an upgrade from version {old} in the machine's upgrades: Upgrade({declared})"
    aside = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"Declare the change: {how}{aside}, then run "
        "`arkhon-rheo check --machine MODULE:ATTR --store PATH` before deploying"
    )


def _retyped(
    stored: Mapping[str, Any], current: Mapping[str, Any], mapping: Mapping[str, str | None]
) -> list[str]:
    """The stored fields whose type the current one does not accept as it is."""
    return [
        name
        for name, now in mapping.items()
        if now in current["types"]
        and name != "lifecycle"
        and accepts(
            stored["types"].get(name, {}),
            current["types"][now],
            stored.get("defs", {}),
            current["defs"],
        )
        is not None
    ]
