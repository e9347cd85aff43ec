"""Digests of states in the form an earlier machine stored them, from their JSON alone.

Every stored event carries the digest of the state it left, made by the
machine that wrote it (`StateHasher`): BLAKE2b of each field's JSON (a
sequence field's chained over its items), then of those in field order. A
later machine no longer has that state type, but its fingerprint kept what
the digest needs: the fields in order, which are chained, each one's JSON
schema (where its sets are: a snapshot keeps a set in the order it iterated
in, the digest sorted it) and the stored value of each lifecycle state. So
replay verification folds the events of an earlier form on their stored JSON
(`StoredForm.apply`, the rule of `apply_event`) and checks each stored digest
as it was made, before any upgrade touches a value.

A fingerprint of the digest form (stored before fields were kept one by one)
does not say which fields were chained: a field the current machine still
has is read as the current machine reads it, one it lost is taken as chained
if its stored value is a list.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from ._schemas import canonical, has_sets, item_type

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..protocols import Machine, StoredEvent

__all__ = ["StoredForm"]

_SIZE = 8
_EMPTY = bytes(_SIZE)


def _hash(data: bytes) -> bytes:
    return blake2b(data, digest_size=_SIZE).digest()


class StoredForm:
    """The stored form of states under one fingerprint: their digests and their fold.

    Args:
        stored: The fingerprint (``None``: the current machine's form).
        machine: The current machine (for what a digest-form fingerprint lacks).
        current: The current machine's fingerprint.
        sample: A state stored under ``stored`` (JSON, unmarked): tells, for a
            digest-form fingerprint, which fields the current machine lost are lists.
    """

    __slots__ = ("_defs", "_items", "_loop", "_schemas", "_sets", "fields", "names", "values")

    def __init__(
        self,
        stored: Mapping[str, Any] | None,
        machine: Machine[Any],
        current: Mapping[str, Any],
        sample: Mapping[str, Any],
    ) -> None:
        own = stored is not None and "types" in stored
        layout: Mapping[str, Any] = stored if own and stored is not None else current
        #: The fields, in the order their digests are combined.
        self.fields: tuple[str, ...] = tuple((stored or current).get("fields", current["fields"]))
        present = machine.state_type.model_fields
        if own:
            items = set(layout["items"])
        else:
            items = {
                name
                for name in self.fields
                if (
                    item_type(present[name].annotation) is not None
                    if name in present
                    else isinstance(sample.get(name), list)
                )
            }
        self._items = frozenset(items)
        self._schemas: Mapping[str, Any] = layout.get("types", {})
        self._defs: Mapping[str, Any] = layout.get("defs", {})
        self._sets = frozenset(
            name
            for name in self.fields
            if name in self._schemas and has_sets(self._schemas[name], self._defs)
        )
        #: Each lifecycle state's stored value, by name, and the names by value.
        self.values: Mapping[str, Any] = layout.get("lifecycle", {})
        self.names: dict[Any, str] = {_key(v): k for k, v in self.values.items()}
        self._loop: str | None = layout.get("loop")

    def field(self, name: str, data: Any) -> bytes:
        """The digest of field ``name`` holding stored value ``data``."""
        if name in self._items and isinstance(data, list):
            schema = self._schemas.get(name, {}).get("items", {}) if name in self._sets else None
            digest = _EMPTY
            for item in data:
                value = item if schema is None else canonical(item, schema, self._defs)
                digest = _hash(digest + to_json(value))
            return digest
        if name in self._sets:
            data = canonical(data, self._schemas[name], self._defs)
        return _hash(to_json(data))

    def start(self, state: Mapping[str, Any]) -> dict[str, bytes]:
        """Each field's digest in ``state`` (stored JSON), in field order."""
        return {name: self.field(name, state.get(name)) for name in self.fields}

    @staticmethod
    def value(digests: Mapping[str, bytes]) -> int:
        """The state's digest from its fields' (as `StateDigest.value` gives it)."""
        combined = _hash(b"".join(digests.values()))
        return int.from_bytes(combined, "big", signed=True)

    def lifecycle(self, state: Mapping[str, Any]) -> str | None:
        """The name of the lifecycle state ``state`` is in (``None``: not one of this form's)."""
        return self.names.get(_key(state.get("lifecycle")))

    def apply(
        self, state: Mapping[str, Any], digests: Mapping[str, bytes], event: StoredEvent
    ) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The state (JSON) and field digests after ``event``, by the rule of `apply_event`.

        Raises:
            ValueError: If the event moves to a state this form does not know.
        """
        patch = event.patch if isinstance(event.patch, dict) else {}
        written: dict[str, Any] = patch.get("set") or {}
        appended: dict[str, Any] = patch.get("append") or {}
        after, fields = dict(state), dict(digests)
        for name, value in written.items():
            after[name] = value
            fields[name] = self.field(name, value)
        for name, items in appended.items():
            after[name] = [*(after.get(name) or ()), *items]
            if name in self._items:
                digest = fields.get(name, _EMPTY)
                for item in items:
                    digest = _hash(digest + to_json(item))
                fields[name] = digest
            else:
                fields[name] = self.field(name, after[name])
        if event.kind == "step":
            if event.to_state not in self.values:
                raise ValueError(
                    f"the event moves to state {event.to_state!r}, unknown to its form"
                )
            after["lifecycle"] = self.values[event.to_state]
            fields["lifecycle"] = self.field("lifecycle", after["lifecycle"])
            if event.to_state == self._loop and event.from_state != event.to_state:
                after["iteration"] = int(after.get("iteration") or 0) + 1
                fields["iteration"] = self.field("iteration", after["iteration"])
            if event.error is not None and "last_error" not in written | appended:
                after["last_error"] = event.error
                fields["last_error"] = self.field("last_error", event.error)
        return after, fields


def _key(value: Any) -> Any:
    """A stored value as a dict key (a list's as a tuple)."""
    return tuple(value) if isinstance(value, list) else value
