"""Sealing a session's sensitive values on their way to the store, and opening them back.

A machine whose state type has `Sensitive` fields stores its sessions through
a `SealedCodec`: the machine's `EventCodec` with a `Sealer` of the session
(its keyring, its id). Each sensitive value goes to the store as a sealed token
(see `Keyring`), in snapshots (`encode_state`, `state_json`) and in event
patches (a sequence field's items one by one, appends included); decoding
opens them before validating. A value stored before its field was marked
sensitive (plain JSON, not a token) still loads as it is. The state's digest is
computed over the plaintext, as for any machine, and stored keyed
(`Keyring.digest`).

Values written to the store but not through the codec, such as a step's
recorded calls, hold a sensitive value only as text: a recorded string that
contains a value the step's patch writes to a sensitive field is sealed whole,
as the step's own, and opened back when the event is decoded (so a replay
re-executes the step on what it really got). Everywhere else, what is shown of
stored data masks the tokens (`masked`).

A session stored by an earlier form of its machine (see ``_upgrade``) is
opened before its upgrades run (`opener`): each token under the field name it
was stored by, so a field renamed or made sensitive since still opens; the
upgraded state is then sealed under the current names by the ``upgrade``
event and the snapshots after it. An earlier form's digests may be plain or
keyed (`Sealer.fits_any`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic_core import from_json, to_json

from .._errors import KeyringError, StoreCorrupt
from ..protocols._seams import (
    SENSITIVE,
    EncodedJson,
    EncodedPatch,
    secret_texts,
    sensitive_fields,
)
from ._codec import EventCodec
from ._keyring import PREFIX

if TYPE_CHECKING:
    from ..protocols import AgentState, Machine, Patch, StoredEvent, TransitionEvent
    from ._keyring import Keyring

__all__ = [
    "SealedCodec",
    "Sealer",
    "is_sealed",
    "masked",
    "opener",
    "session_codec",
    "shown_state",
]

#: The field name recorded calls are sealed for (no state field has it).
_IO = "(recorded calls)"


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a sealed token."""
    return isinstance(value, str) and value.startswith(PREFIX)


def masked(data: Any) -> Any:
    """JSON data with every sealed token in it shown as ``[SENSITIVE]``.

    ``data`` itself is returned when it holds none.
    """
    if isinstance(data, str):
        return SENSITIVE if data.startswith(PREFIX) else data
    if isinstance(data, dict):
        items = {key: masked(value) for key, value in data.items()}
        return data if all(items[k] is data[k] for k in data) else items
    if isinstance(data, list | tuple):
        found = [masked(item) for item in data]
        if all(new is old for new, old in zip(found, data, strict=True)):
            return data
        return found
    return data


def shown_state(state: AgentState) -> dict[str, Any]:
    """``state`` as JSON data, each `Sensitive` field's value shown as ``[SENSITIVE]``."""
    data = state.model_dump(mode="json")
    for name in sensitive_fields(type(state)):
        if name in data:
            data[name] = SENSITIVE
    return data


class Sealer:
    """Seals and opens the sensitive values of one session of one machine.

    Args:
        fields: The machine's sensitive fields.
        items: Those of them that are sequences (sealed item by item).
        keyring: The keys; ``None`` refuses to seal and to open (`KeyringError`).
        session_id: The session: sealed values are bound to it.
    """

    __slots__ = ("fields", "items", "keyring", "session_id")

    def __init__(
        self,
        fields: frozenset[str],
        items: frozenset[str],
        keyring: Keyring | None,
        session_id: str,
    ) -> None:
        self.fields = fields
        self.items = items
        self.keyring = keyring
        self.session_id = session_id

    def _context(self, name: str) -> bytes:
        return f"arkhon-rheo\x00{self.session_id}\x00{name}".encode()

    def _keys(self, name: str, key_id: str = "") -> Keyring:
        keyring = self.keyring
        if keyring is None:
            what = f"is sealed under key {key_id}" if key_id else "must be sealed"
            raise KeyringError(
                f"session {self.session_id!r}: sensitive field {name!r} {what}, and no keyring "
                "was given: pass AgentSystem(secrets=Keyring(key))"
                + (" with the key it was stored with" if key_id else ""),
                session_id=self.session_id,
                field=name,
                key_id=key_id,
            )
        return keyring

    def seal(self, name: str, plaintext: bytes) -> str:
        """The token of ``plaintext``, field ``name``'s JSON (or an item's)."""
        return self._keys(name).seal(plaintext, self._context(name))

    def open(self, name: str, value: Any) -> Any:
        """The JSON data ``value`` holds: opened if it is a token, else ``value`` itself.

        Raises:
            KeyringError: Without a keyring, or one that lacks the key it was sealed with.
            StoreCorrupt: If the token is damaged or was sealed for another field or session.
        """
        if not is_sealed(value):
            return value
        key_id, _, body = value[len(PREFIX) :].partition(":")
        keyring = self._keys(name, key_id)
        if not keyring.holds(key_id):
            raise KeyringError(
                f"session {self.session_id!r}: sensitive field {name!r} was sealed under key "
                f"{key_id}, which the keyring does not hold (it holds "
                f"{', '.join(keyring.key_ids)}): pass that key (after a rotation, as "
                "Keyring(new_key, previous=[old_key]))",
                session_id=self.session_id,
                field=name,
                key_id=key_id,
            )
        try:
            return from_json(keyring.open(key_id, body, self._context(name)))
        except ValueError as exc:
            raise StoreCorrupt(
                f"session {self.session_id!r}: the sealed value of field {name!r} does not "
                f"open under key {key_id} ({exc}): it was changed, or copied from another "
                "session or field"
            ) from None

    # -- JSON data ---------------------------------------------------------------

    def seal_value(self, name: str, data: Any) -> Any:
        """Field ``name``'s JSON data, sealed (a sequence's items one by one)."""
        if name in self.items and isinstance(data, list):
            return [self.seal(name, to_json(item)) for item in data]
        return self.seal(name, to_json(data))

    def open_value(self, name: str, data: Any) -> Any:
        """Field ``name``'s stored JSON data, opened."""
        if name in self.items and isinstance(data, list):
            return [self.open(name, item) for item in data]
        return self.open(name, data)

    def seal_state(self, data: dict[str, Any]) -> dict[str, Any]:
        """A state's JSON data with its sensitive fields sealed (a new dict)."""
        return {
            name: self.seal_value(name, value) if name in self.fields else value
            for name, value in data.items()
        }

    def open_state(self, data: Any) -> Any:
        """A stored state's JSON data with its sensitive fields opened."""
        if not isinstance(data, dict) or not self.fields.intersection(data):
            return data
        return {
            name: self.open_value(name, value) if name in self.fields else value
            for name, value in data.items()
        }

    def seal_patch(self, data: Any) -> Any:
        """A patch's JSON data (``{"set", "append"}``) with its sensitive values sealed."""
        return self._patch(
            data, self.seal_value, lambda n, items: [self.seal(n, to_json(i)) for i in items]
        )

    def open_patch(self, data: Any) -> Any:
        """A stored patch's JSON data with its sensitive values opened."""
        return self._patch(data, self.open_value, lambda n, items: [self.open(n, i) for i in items])

    def _patch(self, data: Any, value: Any, items: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = self.fields
        written = data.get("set") or {}
        appended = data.get("append") or {}
        if not (fields.intersection(written) or fields.intersection(appended)):
            return data
        result = dict(data)
        if written:
            result["set"] = {n: value(n, v) if n in fields else v for n, v in written.items()}
        if appended:
            result["append"] = {n: items(n, v) if n in fields else v for n, v in appended.items()}
        return result

    def seal_encoded(self, encoded: EncodedPatch) -> EncodedPatch:
        """An encoded patch with its sensitive values sealed (the same one if it has none)."""
        fields = self.fields
        if not (fields.intersection(encoded.values) or fields.intersection(encoded.appends)):
            return encoded
        values = dict(encoded.values)
        items = dict(encoded.items)
        for name in fields.intersection(values):
            if name in encoded.items:
                items[name] = [self._token(name, item) for item in encoded.items[name]]
                values[name] = b"[" + b",".join(items[name]) + b"]"
            else:
                values[name] = self._token(name, values[name])
        appends = {
            name: [self._token(name, item) for item in appended] if name in fields else appended
            for name, appended in encoded.appends.items()
        }
        return EncodedPatch(values, appends, items)

    def _token(self, name: str, plaintext: bytes) -> bytes:
        return b'"' + self.seal(name, plaintext).encode("ascii") + b'"'

    # -- recorded calls ----------------------------------------------------------

    def seal_io(self, info: Any, patch: Patch) -> Any:
        """An event's ``info``, each recorded string holding a sensitive value sealed whole.

        The values are those ``patch`` writes to sensitive fields; ``info``
        itself is returned when no recorded string holds one.
        """
        if not isinstance(info, dict) or not info.get("io"):
            return info
        texts: set[str] = set()
        for name in self.fields:
            if name in patch.values:
                texts.update(secret_texts(patch.values[name]))
            if name in patch.appends:
                texts.update(secret_texts(patch.appends[name]))
        if not texts:
            return info
        ordered = sorted(texts, key=len, reverse=True)
        io = _replace_strings(info["io"], ordered, lambda text: self.seal(_IO, to_json(text)))
        return info if io is info["io"] else {**info, "io": io}

    def open_io(self, info: Any) -> Any:
        """A stored event's ``info`` with its sealed recorded strings opened."""
        if not isinstance(info, dict) or not info.get("io") or PREFIX not in json.dumps(info["io"]):
            return info
        return {**info, "io": _open_strings(info["io"], lambda token: self.open(_IO, token))}

    # -- earlier forms ------------------------------------------------------------

    def open_stored(self, name: str, data: Any) -> Any:
        """Field ``name``'s JSON data as an earlier form stored it, every token in it opened.

        A token is opened under the name it was stored by (a sequence's items one
        by one), whether or not the field is sensitive now: for a session read
        before the upgrades of its machine rename, reshape or remove its fields.
        """
        if isinstance(data, list):
            if not any(is_sealed(item) for item in data):
                return data
            return [self.open(name, item) for item in data]
        return self.open(name, data)

    def open_stored_state(self, data: Any) -> Any:
        """A stored snapshot (unmarked) of any form, its tokens opened (see `open_stored`)."""
        if not isinstance(data, dict):
            return data
        opened = {name: self.open_stored(name, value) for name, value in data.items()}
        return data if all(opened[name] is data[name] for name in data) else opened

    def open_stored_patch(self, data: Any) -> Any:
        """A stored patch of any form, its tokens opened (see `open_stored`)."""
        if not isinstance(data, dict):
            return data
        result = dict(data)
        for part in ("set", "append"):
            written = data.get(part)
            if isinstance(written, dict):
                result[part] = self.open_stored_state(written)
        return result

    def fits_any(self, value: int, stored: int) -> bool:
        """Whether ``stored`` is digest ``value``, plain or keyed under a key held.

        For an event an earlier form stored: it was keyed if that form had a
        sensitive field, which its fingerprint does not say.
        """
        keyring = self.keyring
        return value == stored or (keyring is not None and stored in keyring.digests(value))

    # -- digests -----------------------------------------------------------------

    def stored_digest(self, value: int) -> int:
        """The form a state's digest is stored in: keyed under the current key."""
        return self._keys("(the digest)").digest(value)

    def digest_fits(self, value: int, stored: int) -> bool:
        """Whether a stored digest is ``value`` keyed under a key the keyring holds."""
        return stored in self._keys("(the digest)").digests(value)


def _replace_strings(data: Any, texts: list[str], seal: Any) -> Any:
    if isinstance(data, str):
        return seal(data) if any(text in data for text in texts) else data
    if isinstance(data, dict):
        items = {key: _replace_strings(value, texts, seal) for key, value in data.items()}
        return data if all(items[k] is data[k] for k in data) else items
    if isinstance(data, list):
        found = [_replace_strings(item, texts, seal) for item in data]
        return data if all(a is b for a, b in zip(found, data, strict=True)) else found
    return data


def _open_strings(data: Any, open_token: Any) -> Any:
    if is_sealed(data):
        return open_token(data)
    if isinstance(data, dict):
        return {key: _open_strings(value, open_token) for key, value in data.items()}
    if isinstance(data, list):
        return [_open_strings(item, open_token) for item in data]
    return data


class SealedCodec(EventCodec):
    """A machine's `EventCodec` that seals one session's sensitive values (see the module).

    Made by `session_codec`; it shares the machine codec's adapters.
    """

    __slots__ = ("base", "sealer")

    base: EventCodec
    sealer: Sealer

    @classmethod
    def over(cls, codec: EventCodec, sealer: Sealer) -> SealedCodec:
        """``codec`` sealing with ``sealer``.

        A state is encoded by ``codec`` itself, then sealed (a `MarkedCodec`'s
        snapshots keep their form mark); the rest is the machine codec's.
        """
        made = cls.__new__(cls)
        for slot in EventCodec.__slots__:
            object.__setattr__(made, slot, getattr(codec, slot))
        made.base = codec
        made.sealer = sealer
        return made

    def encode_state(self, state: AgentState) -> dict[str, Any]:
        """The state as JSON data (as the codec it was made over encodes it), sealed."""
        return self.sealer.seal_state(self.base.encode_state(state))

    def state_json(self, state: AgentState) -> EncodedJson:
        """The state as compact JSON bytes, its sensitive values sealed."""
        return EncodedJson(to_json(self.encode_state(state)))

    def decode_state(self, data: Any) -> AgentState:
        """A state from stored JSON data, its sealed values opened."""
        return super().decode_state(self.sealer.open_state(data))

    def encode_patch(self, patch: Patch, *, stage: str | None = None) -> dict[str, Any]:
        """The patch as JSON data, its sensitive values sealed."""
        encoded: dict[str, Any] = self.sealer.seal_patch(super().encode_patch(patch, stage=stage))
        return encoded

    def decode_patch(self, data: Any) -> Patch:
        """A patch from stored JSON data, its sealed values opened."""
        return super().decode_patch(self.sealer.open_patch(data))

    def encode_event(
        self, event: TransitionEvent, digest: int | None = None, *, patch: Any = None
    ) -> StoredEvent:
        """The event as the store keeps it: sensitive values sealed, the digest keyed."""
        sealer = self.sealer
        if isinstance(patch, EncodedPatch):
            patch = sealer.seal_encoded(patch)
        elif patch is not None:
            patch = sealer.seal_patch(patch)
        if event.info:
            event = event._replace(info=sealer.seal_io(event.info, event.patch))
        keyed = None if digest is None else sealer.stored_digest(digest)
        return super().encode_event(event, keyed, patch=patch)

    def decode_event(self, stored: StoredEvent) -> TransitionEvent:
        """The event from what the store kept, its sealed values opened."""
        event = super().decode_event(stored)
        if event.info:
            event = event._replace(info=self.sealer.open_io(event.info))
        return event

    def stored_digest(self, value: int) -> int:
        """The form a state's digest is stored in (keyed)."""
        return self.sealer.stored_digest(value)

    def digest_fits(self, value: int, stored: int) -> bool:
        """Whether ``stored`` is digest ``value`` as it was stored (keyed, under any key held)."""
        return self.sealer.digest_fits(value, stored)


def opener(keyring: Keyring | None, session_id: str) -> Sealer:
    """What opens the tokens of session ``session_id`` in any form it was stored in.

    A `Sealer` of no field: its `Sealer.open_stored_state` and
    `Sealer.open_stored_patch` open every token under the name it was stored
    by, its `Sealer.fits_any` checks an earlier form's digests.
    """
    return Sealer(frozenset(), frozenset(), keyring, session_id)


def session_codec(
    machine: Machine[Any], codec: EventCodec, keyring: Keyring | None, session_id: str
) -> EventCodec:
    """The codec session ``session_id`` of ``machine`` is stored through.

    ``codec`` (the machine's) itself when the machine has no sensitive field;
    else a `SealedCodec` over it, sealing with ``keyring``.
    """
    fields = sensitive_fields(machine.state_type)
    if not fields:
        return codec
    items = frozenset(name for name in fields if codec.is_sequence(name))
    return SealedCodec.over(codec, Sealer(fields, items, keyring, session_id))
