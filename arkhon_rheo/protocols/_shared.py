"""`share_fields_set`: frozen models of one shape share one set of the fields set.

Every pydantic model instance carries ``__pydantic_fields_set__``, a ``set``
of its own: about 200 bytes, and one more object the cyclic garbage collector
tracks (a set is tracked even when it holds only strings). A ReAct session of
ten cycles keeps some forty frozen models (its messages, tool calls and
usage figures), so forty such sets, all equal in fours.

A frozen model's set is never changed in place: pydantic refuses assignment to
a frozen model, and its ``model_copy``, ``__copy__`` and ``__deepcopy__``
copy the set before they add to it. So frozen models whose type and fields
set are equal may hold one set, and they do once `share_fields_set` has seen
them. (Changing ``model_fields_set`` in place is not something a frozen
model's user does; the runtime already shares the set between consecutive
states of a frozen state type, see `arkhon_rheo.core`.)
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["share_fields_set"]

#: The most shapes kept; past it, models keep their own sets.
_MAX = 4096

#: The one set per (frozen model type, names); whether each type seen is frozen.
_SETS: dict[tuple[type, frozenset[str]], set[str]] = {}
_FROZEN: dict[type, bool] = {}


def share_fields_set(value: Any) -> None:
    """Give ``value``, if a frozen model, and the frozen models in its fields the shared sets.

    Models in a field directly or in a tuple field are seen to, at any depth;
    anything else is left as it is.
    """
    kind = type(value)
    frozen = _FROZEN.get(kind)
    if frozen is None:
        frozen = issubclass(kind, BaseModel) and bool(kind.model_config.get("frozen"))
        if len(_FROZEN) < _MAX:
            _FROZEN[kind] = frozen
    if not frozen:
        return
    names: set[str] = value.__pydantic_fields_set__
    key = (kind, frozenset(names))
    shared = _SETS.get(key)
    if shared is None:
        shared = names if len(_SETS) >= _MAX else _SETS.setdefault(key, names)
    if shared is not names:
        object.__setattr__(value, "__pydantic_fields_set__", shared)
    for item in value.__dict__.values():
        if type(item) is tuple:
            for inner in item:
                share_fields_set(inner)
        elif isinstance(item, BaseModel):
            share_fields_set(item)
