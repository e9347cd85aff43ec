"""The JSON schemas of a state type's fields: kept in fingerprints, compared, read back.

A fingerprint keeps each field's JSON schema (validation mode, titles and
descriptions left out) so that a later version of the machine can tell a
compatible change from one that needs an upgrade: `accepts` says whether every
value the old schema describes is one the new schema takes (a new ``None``
branch, a new enum member, a looser bound: yes; a narrower type, a nested
field removed: no, and why). `canonical` puts a stored value in the form its
digest was made of (sets sorted), reading from the schema where the sets are.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from ..protocols import History

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["accepts", "canonical", "has_sets", "item_type", "state_schema", "strip", "type_name"]

#: Schema keys that say nothing about the values a schema accepts.
_COSMETIC = frozenset({"title", "description", "examples", "default", "deprecated"})
#: Keys whose value maps names (of properties, of definitions) to schemas.
_NAMED = frozenset({"properties", "$defs", "definitions", "patternProperties"})
#: Bounds a new schema may loosen: a lower bound may go down, an upper one up.
_LOWER = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})
#: Keys `accepts` reads itself; any other must be equal on both sides.
_STRUCTURAL = frozenset(
    {
        "type",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "items",
        "prefixItems",
        "properties",
        "required",
        "additionalProperties",
        "uniqueItems",
        "discriminator",
        *_LOWER,
        *_UPPER,
    }
)
_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def strip(schema: Any) -> Any:
    """``schema`` without its cosmetic keys (titles, descriptions, defaults, examples)."""
    if isinstance(schema, dict):
        return {
            key: (
                {name: strip(value) for name, value in item.items()}
                if key in _NAMED and isinstance(item, dict)
                else strip(item)
            )
            for key, item in schema.items()
            if key not in _COSMETIC
        }
    if isinstance(schema, list):
        return [strip(item) for item in schema]
    return schema


def state_schema(state_type: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each field's stripped JSON schema, and the definitions they refer to.

    A field whose type has no JSON schema gets ``{"x-type": "<its annotation>"}``,
    which accepts only itself.
    """
    fields = state_type.model_fields
    try:
        schema = state_type.model_json_schema()
    except Exception:  # a type without a JSON schema: the annotations stand in
        return {
            name: {"x-type": type_name(info.rebuild_annotation())} for name, info in fields.items()
        }, {}
    properties = schema.get("properties", {})
    found = {
        name: strip(properties[name]) if name in properties else _opaque(info)
        for name, info in fields.items()
    }
    return found, strip(schema.get("$defs", {}))


def _opaque(info: Any) -> dict[str, Any]:
    return {"x-type": type_name(info.rebuild_annotation())}


def _literal(value: Any) -> str:
    return repr(value.value if isinstance(value, enum.Enum) else value)


def type_name(annotation: Any) -> str:
    """A readable name for a field's type: ``int | None``, ``tuple[Note, ...]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is None or annotation is type(None):
        return "None"
    if origin is typing.Literal:
        return f"Literal[{', '.join(_literal(arg) for arg in args)}]"
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Union or origin is types.UnionType:
        return " | ".join(type_name(arg) for arg in args)
    if origin is not None:
        name = getattr(origin, "__qualname__", None) or repr(origin).rsplit(".", 1)[-1]
        inner = ", ".join("..." if arg is Ellipsis else type_name(arg) for arg in args)
        return f"{name}[{inner}]" if args else name
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


# -- compatibility --------------------------------------------------------------------


class _Walk:
    """One comparison of an old schema with a new one, each with its own definitions."""

    __slots__ = ("new_defs", "old_defs", "seen")

    def __init__(self, old_defs: Mapping[str, Any], new_defs: Mapping[str, Any]) -> None:
        self.old_defs = old_defs
        self.new_defs = new_defs
        self.seen: set[tuple[str, str]] = set()

    @staticmethod
    def _resolve(schema: Any, defs: Mapping[str, Any]) -> tuple[Any, str]:
        ref = ""
        while isinstance(schema, dict) and "$ref" in schema:
            ref = str(schema["$ref"])
            target = defs.get(ref.rsplit("/", 1)[-1])
            if target is None:
                return schema, ref
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if rest else target
        while isinstance(schema, dict) and list(schema) == ["allOf"] and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        return schema, ref

    def accepts(self, old: Any, new: Any) -> str | None:
        """Why a value of ``old`` may not be one of ``new`` (``None``: every one is)."""
        old, old_ref = self._resolve(old, self.old_defs)
        new, new_ref = self._resolve(new, self.new_defs)
        if old_ref and new_ref:
            if (old_ref, new_ref) in self.seen:
                return None  # a recursive type: assumed alike where it recurs
            self.seen.add((old_ref, new_ref))
        if new is True or new == {}:
            return None
        if (
            not isinstance(old, dict)
            or not isinstance(new, dict)
            or "x-type" in old
            or "x-type" in new
        ):
            return None if old == new else _DIFFER
        if any(key in old or key in new for key in ("anyOf", "oneOf")):
            return self._unions(old, new)
        old_values, new_values = _values(old), _values(new)
        if new_values is not None:
            if old_values is None:
                return "the new type accepts only some values"
            lost = [v for v in old_values if not any(_same(v, w) for w in new_values)]
            return f"{', '.join(repr(v) for v in lost)} no longer accepted" if lost else None
        if not _kinds_fit(_types(old, old_values), _types(new, None)):
            return _DIFFER
        if old_values is not None:
            return None  # constants of an accepted type: bounds on them are not compared
        return self._constraints(old, new) or self._arrays(old, new) or self._objects(old, new)

    def _unions(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
        for key in ("anyOf", "oneOf"):
            if key in old:
                found = (self.accepts(branch, new) for branch in old[key])
                return next((reason for reason in found if reason is not None), None)
        branches = new.get("anyOf", new.get("oneOf", ()))
        reasons = [self.accepts(old, branch) for branch in branches]
        if any(reason is None for reason in reasons):
            return None
        return next((r for r in reasons if r != _DIFFER), _DIFFER)

    def _constraints(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
        for key, bound in new.items():
            if key in _LOWER:
                if key not in old or old[key] < bound:
                    return f"{key} {bound} is new or stricter"
            elif key in _UPPER:
                if key not in old or old[key] > bound:
                    return f"{key} {bound} is new or stricter"
            elif key not in _STRUCTURAL and old.get(key) != bound:
                return f"{key} {bound!r} is new or changed"
        if new.get("uniqueItems") and not old.get("uniqueItems"):
            return "items must now be unique"
        return None

    def _arrays(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
        if "prefixItems" in new:
            if "prefixItems" not in old:
                return "the tuple's shape differs"
            # Items past either end are left to the bounds (``minItems``, ``maxItems``).
            pairs = zip(old["prefixItems"], new["prefixItems"], strict=False)
            for index, (a, b) in enumerate(pairs):
                if (reason := self.accepts(a, b)) is not None:
                    return f"item {index}: {reason}"
        if "items" in new and new["items"] is not True:
            olds = old["prefixItems"] if "prefixItems" in old else [old.get("items", {})]
            for item in olds:
                if (reason := self.accepts(item, new["items"])) is not None:
                    return f"an item: {reason}"
        return None

    def _objects(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
        old_props, new_props = old.get("properties", {}), new.get("properties", {})
        old_required = set(old.get("required", ()))
        for name in new.get("required", ()):
            if name not in old_required:
                return f"{name!r} is now required"
        for name, schema in new_props.items():
            if name in old_props and (reason := self.accepts(old_props[name], schema)) is not None:
                return f"{name!r}: {reason}"
        extra = new.get("additionalProperties")
        for name, schema in old_props.items():
            if name in new_props:
                continue
            if isinstance(extra, dict):
                if (reason := self.accepts(schema, extra)) is not None:
                    return f"{name!r}: {reason}"
            elif extra is not True:
                return f"{name!r} is gone"
        old_extra = old.get("additionalProperties")
        if isinstance(extra, dict) and old_extra not in (None, False):
            reason = self.accepts({} if old_extra is True else old_extra, extra)
            if reason is not None:
                return f"a value: {reason}"
        if extra is False and old_extra is not False and not old_props:
            return "no other keys are accepted now"
        return None


def accepts(
    old: Any, new: Any, old_defs: Mapping[str, Any], new_defs: Mapping[str, Any]
) -> str | None:
    """Why a value of schema ``old`` may not validate as ``new`` (``None``: every one does).

    Conservative: a pair it cannot compare is reported as differing.
    """
    return _Walk(old_defs, new_defs).accepts(old, new)


_DIFFER = "the types differ"


def _kinds_fit(old: set[str] | None, new: set[str] | None) -> bool:
    """Whether every JSON type of ``old`` is one of ``new`` (a number takes an integer)."""
    if new is None:
        return True
    if old is None:
        return False
    if "number" in new:
        new = new | {"integer"}
    return old <= new


def _values(schema: Mapping[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema and isinstance(schema["enum"], list):
        return list(schema["enum"])
    return None


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _types(schema: Mapping[str, Any], values: list[Any] | None) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    if values is not None:
        return {_JSON_TYPES.get(type(value), "object") for value in values}
    return None


# -- stored values ----------------------------------------------------------------------


def has_sets(schema: Any, defs: Mapping[str, Any], _seen: set[str] | None = None) -> bool:
    """Whether values of ``schema`` may hold a set (an array of unique items)."""
    seen = set() if _seen is None else _seen
    if isinstance(schema, dict):
        if schema.get("uniqueItems") is True:
            return True
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            seen.add(ref)
            if has_sets(defs.get(ref.rsplit("/", 1)[-1]), defs, seen):
                return True
        return any(has_sets(value, defs, seen) for key, value in schema.items() if key != "$ref")
    if isinstance(schema, list):
        return any(has_sets(item, defs, seen) for item in schema)
    return False


def canonical(data: Any, schema: Any, defs: Mapping[str, Any]) -> Any:
    """Stored JSON ``data`` with every set (per ``schema``) sorted by its items' JSON.

    The form a value's digest is made of (see `arkhon_rheo.protocols` ``canonical``):
    a snapshot keeps a set in the order it iterated in.
    """
    schema, _ = _Walk._resolve(schema, defs)
    if not isinstance(schema, dict):
        return data
    for key in ("anyOf", "oneOf"):
        if key in schema:
            kind = _JSON_TYPES.get(type(data), "object")
            for branch in schema[key]:
                resolved, _ = _Walk._resolve(branch, defs)
                types_ = _types(resolved, _values(resolved)) if isinstance(resolved, dict) else None
                if types_ is None or kind in types_ or (kind == "integer" and "number" in types_):
                    return canonical(data, resolved, defs)
            return data
    if isinstance(data, list):
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list):
            items = [
                canonical(item, prefix[i] if i < len(prefix) else schema.get("items", {}), defs)
                for i, item in enumerate(data)
            ]
        else:
            items = [canonical(item, schema.get("items", {}), defs) for item in data]
        if schema.get("uniqueItems") is True:
            items.sort(key=to_json)
        return items
    if isinstance(data, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", {})
        return {
            key: canonical(value, props.get(key, extra if isinstance(extra, dict) else {}), defs)
            for key, value in data.items()
        }
    return data


def item_type(annotation: Any) -> Any | None:
    """The item type of ``History[X]`` or ``tuple[X, ...]``, else ``None``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is History or annotation is History:
        return args[0] if args else Any
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None
