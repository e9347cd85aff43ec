"""`EncodedPatch`: a patch whose values are JSON already, handed to the stores that take it.

The supervisor turns each value a commit writes into JSON bytes once: the
state's digest is chained over those bytes, and a store that takes encoded
patches (the package's own: they set ``takes_encoded = True``) splices them
into its row as they are. Any other store gets the patch as plain JSON data
(`EncodedPatch.data`), as the `Store` protocol promises.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence

    from ._store import NewMessage

__all__ = [
    "EncodedJson",
    "EncodedPatch",
    "QueueAppend",
    "Queued",
    "StoreSupport",
]


class EncodedPatch:
    """A patch as JSON bytes: each assigned value's, and each appended item's.

    Attributes:
        values: The JSON of each assigned value, by field, in the patch's order.
        appends: The JSON of each appended item, by field.
        items: For a sequence field assigned whole, the JSON of each of its items
            (``values`` holds them joined as one JSON array).
    """

    __slots__ = ("appends", "items", "values")

    def __init__(
        self,
        values: dict[str, bytes],
        appends: dict[str, list[bytes]],
        items: dict[str, list[bytes]] | None = None,
    ) -> None:
        self.values = values
        self.appends = appends
        self.items: dict[str, list[bytes]] = {} if items is None else items

    @property
    def size(self) -> int:
        """How many bytes of JSON the values and items take."""
        total = sum(map(len, self.values.values()))
        for items in self.appends.values():
            total += sum(map(len, items)) + len(items)
        return total

    def json(self) -> bytes:
        """The patch as ``{"set": {...}, "append": {...}}`` JSON (parts left out when empty)."""
        parts: list[bytes] = []
        if self.values:
            fields = b",".join(_key(name) + value for name, value in self.values.items())
            parts.append(b'"set":{' + fields + b"}")
        if self.appends:
            fields = b",".join(
                _key(name) + b"[" + b",".join(items) + b"]" for name, items in self.appends.items()
            )
            parts.append(b'"append":{' + fields + b"}")
        return b"{" + b",".join(parts) + b"}"

    def data(self) -> Any:
        """The patch as plain JSON data, what a store that does not take encoded patches gets."""
        return json.loads(self.json())

    def __repr__(self) -> str:
        return f"EncodedPatch({self.json().decode()})"


class EncodedJson(bytes):
    """JSON bytes that pydantic's serializer wrote: a store keeps them without parsing them.

    A store that takes encoded snapshots checks plain ``bytes`` are JSON before it
    keeps them (a store never holds what it cannot read back); the supervisor's
    own snapshots come as this type, and are written as they are.
    """

    __slots__ = ()


def _key(name: str) -> bytes:
    return json.dumps(name, ensure_ascii=False).encode() + b":"


class Queued(Protocol):
    """A write a store queued without a coroutine of its own (see `StoreSupport.queue`)."""

    #: Why the store refused it, once its batch is resolved (``None``: stored).
    error: Exception | None
    #: Set by a caller that stopped waiting: a refusal is then logged, not raised.
    abandoned: bool


class QueueAppend(Protocol):
    """A store's ``append``, queued now: the write and what to await, or ``None``.

    ``None``: the store cannot queue it now; call its ``append`` instead (which
    then does all the work). Otherwise await the awaitable returned (it returns
    once the write's batch is resolved, as ``append`` would), then read the
    write's ``error``; a caller that stops waiting sets ``abandoned``.
    Arguments as ``append``'s, positionally: session, events, snapshot, status,
    applied, posts, owner.
    """

    def __call__(
        self,
        session_id: str,
        events: Sequence[Any],
        snapshot: tuple[int, Any] | None,
        status: str | None,
        applied: int | None,
        posts: Sequence[NewMessage],
        owner: str | None,
        /,
    ) -> tuple[Queued, Awaitable[object]] | None: ...


class StoreSupport:
    """What ``store`` supports beyond the `Store` protocol, probed once, for its writers.

    The package's own stores support all of it; any other store gets what the
    protocol promises (plain JSON data, an awaited ``append``, a pause in two
    writes).

    Attributes:
        encoded: Whether it takes `EncodedPatch` patches and snapshots as JSON
            bytes (it sets ``takes_encoded = True``).
        queue: Its way to queue an append with no coroutine of its own, if it
            has one (the package's group-commit stores, SQLite on its writer
            thread): a commit waiting for its transaction then keeps no
            coroutine frame of the store's alive (nor walked by the cyclic GC
            while hundreds wait). Only a store that takes encoded values has it.
    """

    __slots__ = ("_parks", "encoded", "queue", "store")

    def __init__(self, store: object) -> None:
        self.store = store
        self.encoded = getattr(store, "takes_encoded", False) is True
        found = getattr(store, "queue_append", None)
        self.queue: QueueAppend | None = found if self.encoded and callable(found) else None
        self._parks: bool | None = None

    @property
    def parks(self) -> bool:
        """Whether its ``append`` takes ``waiting=`` (parks the session in the same write).

        The package's stores do; a store written before `Store.append` took it
        (or a wrapper that names its arguments) does not: a pause then takes two
        writes, its append and a `Store.park`. Read from ``append``'s signature
        the first time it is asked.
        """
        if self._parks is None:
            self._parks = _parks_on_append(self.store)
        return self._parks


def _parks_on_append(store: object) -> bool:
    append = getattr(store, "append", None)
    try:
        parameters = inspect.signature(append).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return "waiting" in parameters or any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()
    )
