"""An MCP server's tool's input schema: checked when the toolbox opens, then each call's arguments.

A server's ``inputSchema`` is the server's to write, and the toolbox follows
it to check the arguments the model sends (`ArgumentCheck`). What it may
reference is the schema itself: a ``$ref`` is followed within the schema
document (``#/$defs/...``, an anchor, an embedded ``$id``) and the JSON Schema
metaschemas jsonschema bundles, never fetched from anywhere (an HTTP GET from
the agent's host, its answer quoted back to the model, is a server-side
request forgery). `unfollowable` says, when the toolbox opens, what keeps a
schema from being followed: a reference to another document, one that points
nowhere or at what is not a schema, or references that loop back to where
they started without going into the arguments (``{"$ref": "#"}``: following
it never ends).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from referencing import Registry, Specification
    from referencing._core import Resolver

__all__ = ["ArgumentCheck", "unfollowable"]

_MAX_ERRORS = 5
_MAX_SHOWN = 80

#: The keywords that apply a schema to the instance itself (not to a part of it):
#: a loop of them never ends. References, then lists of schemas, then one schema,
#: then maps of names to schemas.
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_IN_PLACE_LISTS = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONES = ("not", "if", "then", "else")
_IN_PLACE_MAPS = ("dependentSchemas", "dependencies")


def _refuse(uri: str) -> Any:
    """The registry's retrieval: none (a reference outside the schema is not fetched)."""
    from referencing.exceptions import NoSuchResource

    raise NoSuchResource(uri)


def _registry() -> Registry[Any]:
    """The metaschemas jsonschema bundles, and nothing retrieved."""
    from referencing import Registry

    bundled: Any = importlib.import_module("jsonschema_specifications")
    # attrs' field alias (``retrieve``) is beyond mypy, as jsonschema's own call notes.
    registry: Registry[Any] = bundled.REGISTRY.combine(Registry(retrieve=_refuse))  # type: ignore[call-arg]
    return registry


def _shown(ref: object) -> str:
    text = repr(ref)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 4] + "...'"


class _Walk:
    """One schema's nodes (its subschemas, and what its references lead to), by identity."""

    def __init__(self, specification: Specification[Any]) -> None:
        self.specification = specification
        #: Each node's contents, kept so that their ids stay theirs.
        self.nodes: dict[int, Any] = {}
        #: The nodes each node applies to the instance itself.
        self.in_place: dict[int, list[int]] = {}

    def follow(self, schema: Any, resolver: Resolver[Any]) -> str | None:
        """Reach every node from ``schema``; what cannot be followed, or ``None``."""
        pending: list[tuple[Any, Resolver[Any]]] = [(schema, resolver)]
        self.nodes[id(schema)] = schema
        while pending:
            contents, here = pending.pop()
            if not isinstance(contents, dict):
                self.in_place[id(contents)] = []
                continue
            reached: list[tuple[Any, Resolver[Any], bool]] = []
            problem = self._references(contents, here, reached)
            if problem is not None:
                return problem
            resource = self.specification.create_resource(contents)
            in_place = {id(one) for one in _applied_in_place(contents)}
            for sub in resource.subresources():
                child = sub.contents
                reached.append((child, here.in_subresource(sub), id(child) in in_place))
            self.in_place[id(contents)] = [id(one) for one, _, same in reached if same]
            for child, resolver_of_child, _ in reached:
                if id(child) not in self.nodes:
                    self.nodes[id(child)] = child
                    pending.append((child, resolver_of_child))
        return None

    @staticmethod
    def _references(
        contents: dict[str, Any],
        here: Resolver[Any],
        reached: list[tuple[Any, Resolver[Any], bool]],
    ) -> str | None:
        from referencing.exceptions import Unresolvable

        for keyword in _REFERENCES:
            if keyword not in contents:
                continue
            ref = contents[keyword]
            if not isinstance(ref, str):
                return f"its {keyword} {_shown(ref)} is not a string"
            try:
                resolved = here.lookup(ref)
            except (Unresolvable, LookupError, TypeError, ValueError):  # a pointer into a list
                if ref.startswith("#"):
                    return f"its {keyword} {_shown(ref)} points nowhere in the schema"
                return (
                    f"its {keyword} {_shown(ref)} refers to a document outside the schema "
                    "(remote references are never fetched)"
                )
            if not isinstance(resolved.contents, dict | bool):
                return f"its {keyword} {_shown(ref)} points at something that is not a schema"
            reached.append((resolved.contents, resolved.resolver, True))
        return None

    def loop(self) -> bool:
        """Whether the schemas applied to the instance itself loop (a DFS, without recursion)."""
        done: set[int] = set()
        for start in self.in_place:
            if start in done:
                continue
            on_path = {start}
            stack = [(start, iter(self.in_place[start]))]
            while stack:
                node, edges = stack[-1]
                following = next(edges, None)
                if following is None:
                    stack.pop()
                    on_path.discard(node)
                    done.add(node)
                elif following in on_path:
                    return True
                elif following not in done:
                    on_path.add(following)
                    stack.append((following, iter(self.in_place.get(following, ()))))
        return False


def _applied_in_place(contents: Mapping[str, Any]) -> Iterator[Any]:
    """The subschemas of ``contents`` applied to the same instance it is."""
    for keyword in _IN_PLACE_LISTS:
        value = contents.get(keyword)
        if isinstance(value, list):
            yield from value
    for keyword in _IN_PLACE_ONES:
        if keyword in contents:
            yield contents[keyword]
    for keyword in _IN_PLACE_MAPS:
        value = contents.get(keyword)
        if isinstance(value, dict):
            yield from value.values()


def _specification(schema: Mapping[str, Any]) -> Specification[Any]:
    """The JSON Schema draft ``schema`` is read by (its ``$schema``, else 2020-12)."""
    from referencing.jsonschema import DRAFT202012, specification_with

    dialect = schema.get("$schema")
    if not isinstance(dialect, str):
        return DRAFT202012
    return specification_with(dialect, default=DRAFT202012)


def unfollowable(schema: Mapping[str, Any]) -> str | None:
    """What keeps ``schema`` from being followed (see the module's docstring), or ``None``."""
    specification = _specification(schema)
    root = dict(schema)
    walk = _Walk(specification)
    resolver = _registry().resolver_with_root(specification.create_resource(root))
    problem = walk.follow(root, resolver)
    if problem is not None:
        return problem
    if walk.loop():
        return (
            "its references loop back to where they started without going into the "
            "arguments (following them never ends)"
        )
    return None


class ArgumentCheck:
    """A tool's arguments checked against its input schema, with jsonschema.

    References are followed within the schema alone (nothing is fetched); a
    schema `unfollowable` refuses is refused before this is made. A schema
    jsonschema cannot read is not checked here (the server checks).
    """

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any]) -> None:
        # jsonschema (the MCP SDK's dependency) has no type hints of its own.
        validators: Any = importlib.import_module("jsonschema.validators")
        errors: Any = importlib.import_module("jsonschema.exceptions")
        from referencing import Registry

        self._validator: Any = None
        try:
            cls = validators.validator_for(dict(schema), default=validators.Draft202012Validator)
            cls.check_schema(dict(schema))
            nothing_fetched = Registry(retrieve=_refuse)  # type: ignore[call-arg]
            self._validator = cls(dict(schema), registry=nothing_fetched)
        except (errors.SchemaError, TypeError, ValueError):
            self._validator = None

    def problems(self, arguments: Mapping[str, Any]) -> str:
        """What is wrong with ``arguments``, one clause per error (``""``: nothing)."""
        if self._validator is None:
            return ""
        errors = sorted(self._validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        clauses = []
        for error in errors[:_MAX_ERRORS]:
            where = ".".join(str(part) for part in error.path) or "(arguments)"
            clauses.append(f"{where}: {error.message}")
        if len(errors) > _MAX_ERRORS:
            clauses.append(f"and {len(errors) - _MAX_ERRORS} more")
        return "; ".join(clauses)
