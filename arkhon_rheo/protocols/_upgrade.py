"""`Upgrade`: how stored sessions of one version of a machine are read by the next.

A machine states its version (``Machine(version=2, upgrades={1: Upgrade(...)})``).
A session is stored with the fingerprint of the version that started it; a
later version reads it through the upgrades from that version to its own,
one version at a time, applied to the JSON the store holds as it is loaded:
the first snapshot read and every event's patch. The log is never rewritten.

Compatible changes need no upgrade: a new field with a default, a type that
accepts more (``int`` to ``int | None``, a new ``Literal`` or enum member), a
new state or transition. Renames, removals and reshapes do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._errors import ConfigurationError

__all__ = ["Upgrade", "checked_upgrades"]

#: What ``values=`` is: the JSON values of a snapshot (every field) or of a patch
#: (the fields it sets), by field name, in; the same, upgraded, out.
ValuesFn = Callable[[dict[str, Any]], dict[str, Any]]
#: What ``items=`` maps a field to: one item of a sequence field, as JSON, in and out.
ItemFn = Callable[[Any], Any]


class Upgrade:
    """What changed from one version of a machine's state type to the next.

    Applied to the JSON a store holds for a session of the earlier version,
    in this order: ``rename``, ``remove``, then ``items`` and ``values`` (which
    see the new names). Each sees JSON data (what ``model_dump(mode="json")``
    gives) and returns JSON data; what it gets is its own copy.

    Args:
        rename: Old field name to new, for a field that keeps its values.
        remove: Fields the new version no longer has (their stored values are dropped).
        items: For a sequence field (``History[X]``, ``tuple[X, ...]``), by its new
            name, a function of one stored item that returns the item as the new
            version takes it: applied to every item a snapshot holds, a patch sets
            or a patch appends.
        values: A function of a dict of field values that returns it upgraded: a
            reshape (one field split in two, a value computed anew). It gets a
            snapshot's every field, and an event's patch's set fields only (a
            patch that does not write a field does not have it), so it upgrades
            what it is given and adds nothing that is not derived from it.

    Raises:
        ConfigurationError: If a name is not a non-empty string, a field is
            both renamed and removed, or a function is not callable.
    """

    __slots__ = ("items", "remove", "rename", "values")

    def __init__(
        self,
        *,
        rename: Mapping[str, str] | None = None,
        remove: Iterable[str] = (),
        items: Mapping[str, ItemFn] | None = None,
        values: ValuesFn | None = None,
    ) -> None:
        self.rename: dict[str, str] = dict(rename or {})
        self.remove: frozenset[str] = frozenset([remove] if isinstance(remove, str) else remove)
        self.items: dict[str, ItemFn] = dict(items or {})
        self.values = values
        names = [*self.rename, *self.rename.values(), *self.remove, *self.items]
        if bad := [name for name in names if not isinstance(name, str) or not name]:
            raise ConfigurationError(f"Upgrade: field names are non-empty strings, got {bad[0]!r}")
        if both := sorted(self.remove & self.rename.keys()):
            raise ConfigurationError(f"Upgrade: {both} are both renamed and removed")
        for name, fn in self.items.items():
            if not callable(fn):
                raise ConfigurationError(f"Upgrade: items[{name!r}] must be callable, got {fn!r}")
        if values is not None and not callable(values):
            raise ConfigurationError(f"Upgrade: values must be callable, got {values!r}")

    def describe(self) -> dict[str, Any]:
        """What it declares, as JSON data (kept in a machine's fingerprint)."""
        return {
            "rename": dict(sorted(self.rename.items())),
            "remove": sorted(self.remove),
            "items": sorted(self.items),
            "values": self.values is not None,
        }

    def names(self, names: Iterable[str]) -> list[str]:
        """Field names (an event's reads or writes) as the next version has them."""
        return [self.rename.get(name, name) for name in names if name not in self.remove]

    def _renamed(self, data: Mapping[str, Any]) -> dict[str, Any]:
        return {
            self.rename.get(name, name): value
            for name, value in data.items()
            if name not in self.remove
        }

    def _items(self, name: str, values: Any) -> Any:
        fn = self.items.get(name)
        if fn is None or not isinstance(values, list):
            return values
        return [fn(item) for item in values]

    def state(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A snapshot's JSON (every field), upgraded."""
        upgraded = self._renamed(data)
        for name in self.items:
            if name in upgraded:
                upgraded[name] = self._items(name, upgraded[name])
        return self._values(upgraded)

    def patch(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A patch's JSON (``{"set": {...}, "append": {...}}``), upgraded."""
        upgraded: dict[str, Any] = {}
        values = data.get("set")
        if values:
            renamed = self._renamed(values)
            for name in self.items:
                if name in renamed:
                    renamed[name] = self._items(name, renamed[name])
            renamed = self._values(renamed)
            if renamed:
                upgraded["set"] = renamed
        appends = data.get("append")
        if appends:
            appended = {
                name: self._items(name, items) for name, items in self._renamed(appends).items()
            }
            if appended:
                upgraded["append"] = appended
        return upgraded

    def _values(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.values is None or not data:
            return data
        result = self.values(data)
        if not isinstance(result, dict):
            raise ConfigurationError(
                f"Upgrade: values= must return a dict of field values, got {type(result).__name__}"
            )
        return result

    def __repr__(self) -> str:
        parts = [
            f"{key}={value!r}"
            for key, value in (("rename", self.rename), ("remove", sorted(self.remove)))
            if value
        ]
        if self.items:
            parts.append(f"items={sorted(self.items)!r}")
        if self.values is not None:
            parts.append(f"values={getattr(self.values, '__name__', self.values)!r}")
        return f"Upgrade({', '.join(parts)})"


def checked_upgrades(
    machine: str,
    version: int,
    upgrades: Mapping[int, Upgrade | ValuesFn] | None,
    fields: Iterable[str],
) -> dict[int, Upgrade]:
    """``upgrades`` checked against ``version``; a plain function is ``Upgrade(values=fn)``.

    Each key is the version an upgrade reads (``upgrades[1]`` makes version 1
    sessions version 2 ones); they run from the oldest declared to
    ``version - 1`` with none missing in between. The last one's new names are
    fields of the state type (``fields``).

    Raises:
        ConfigurationError: Naming the version, key or name at fault.
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigurationError(
            f"machine {machine!r}: version must be a whole number from 1, got {version!r}"
        )
    found: dict[int, Upgrade] = {}
    for key, upgrade in (upgrades or {}).items():
        if isinstance(key, bool) or not isinstance(key, int) or not 1 <= key < version:
            raise ConfigurationError(
                f"machine {machine!r}: upgrades are keyed by the version they read, from 1 to "
                f"{version - 1} (this machine is version {version}), got {key!r}"
            )
        if isinstance(upgrade, Upgrade):
            found[key] = upgrade
        elif callable(upgrade):
            found[key] = Upgrade(values=upgrade)
        else:
            raise ConfigurationError(
                f"machine {machine!r}: upgrades[{key}] must be an Upgrade or a function of a "
                f"dict of field values, got {upgrade!r}"
            )
    if found:
        missing = [v for v in range(min(found), version) if v not in found]
        if missing:
            raise ConfigurationError(
                f"machine {machine!r}: upgrades from version {min(found)} to {version} need "
                f"one from each version in between; upgrades[{missing[0]}] is missing"
            )
        last = found[version - 1]
        names = set(fields)
        unknown = sorted({*last.rename.values(), *last.items} - names)
        if unknown:
            raise ConfigurationError(
                f"machine {machine!r}: upgrades[{version - 1}] names {unknown}, which the "
                f"state type of version {version} does not have"
            )
    return dict(sorted(found.items()))
