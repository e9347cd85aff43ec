"""`Keyring`: the keys a store's sensitive values are sealed with.

A value of a `Sensitive` state field is stored as a *sealed token*, a JSON
string::

    arkhon-sealed:1:<key id>:<base64url of nonce + ciphertext + tag>

sealed with AES-256-GCM (the ``cryptography`` package: ``pip install
'arkhon-rheo[secrets]'``) under the keyring's current key, a fresh 96-bit
nonce each time, and the session's id and the field's name as associated
data: a token opens only as the value of the field and session it was sealed
for (copied elsewhere, it is refused as damaged). The key id (8 hex digits of
a BLAKE2b hash of the key) says which key opens it, so a keyring that lost the
key, or was given another, says so by name.

A state's digest, stored with each event for `replay`, is made over the
plaintext (a replay recomputes it from the values it folds); for a machine
with sensitive fields it is stored *keyed*: BLAKE2b of the digest under a key
derived from the keyring's current key, so the digest of a low-entropy value
(a PIN) cannot be checked against guesses without the key. `digests` gives the
keyed forms under every key the keyring holds, so events stored before a
rotation still verify.

Rotating: ``Keyring(new_key, previous=[old_key])`` seals with the new key and
opens (and verifies) what the old one sealed. Nothing is re-sealed in place.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from hashlib import blake2b
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["PREFIX", "Keyring"]

#: How every sealed token begins (version 1 of the format).
PREFIX = "arkhon-sealed:1:"
_KEY_BYTES = 32
_NONCE_BYTES = 12
#: The environment variable `Keyring.from_env` reads by default.
ENV_VAR = "ARKHON_RHEO_KEY"


def _aead() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - exercised where the extra is absent
        raise ConfigurationError(
            "sealing sensitive fields needs the 'cryptography' package: "
            "pip install 'arkhon-rheo[secrets]'"
        ) from None
    return AESGCM


def _key_bytes(key: str | bytes) -> bytes:
    """The 32 bytes of ``key`` (raw, or URL-safe base64); never shown in an error."""
    if isinstance(key, bytes) and len(key) == _KEY_BYTES:
        return key
    if isinstance(key, str | bytes):
        text = key.decode("ascii", "replace") if isinstance(key, bytes) else key
        text = text.strip()
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == _KEY_BYTES:
            return raw
    raise ConfigurationError(
        f"a keyring key is {_KEY_BYTES} random bytes, or those bytes in URL-safe base64 "
        f"(Keyring.generate() makes one); got a {type(key).__name__} that is neither"
    )


def _key_id(key: bytes) -> str:
    return blake2b(key, digest_size=4, person=b"arkhon-key-id").hexdigest()


class _Key:
    __slots__ = ("cipher", "digest_key", "key_id")

    def __init__(self, key: bytes) -> None:
        self.key_id = _key_id(key)
        self.cipher = _aead()(key)
        self.digest_key = blake2b(key, digest_size=32, person=b"arkhon-digest").digest()

    def digest(self, value: int) -> int:
        raw = value.to_bytes(8, "big", signed=True)
        keyed = blake2b(raw, digest_size=8, key=self.digest_key).digest()
        return int.from_bytes(keyed, "big", signed=True)


class Keyring:
    """The keys sensitive values are sealed with (see the module's doc).

    Give it to the agent system: ``AgentSystem(secrets=Keyring(key))``. Keep
    the key out of the code and the store: read it from the environment
    (`from_env`) or a secrets manager.

    Args:
        key: The current key: 32 random bytes, or their URL-safe base64 (what
            `generate` returns). New values are sealed with it.
        previous: Keys used before a rotation: what they sealed still opens.

    Raises:
        ConfigurationError: If a key is not 32 bytes (or their base64), or the
            ``cryptography`` package is not installed.
    """

    __slots__ = ("_current", "_keys")

    def __init__(self, key: str | bytes, *, previous: Iterable[str | bytes] = ()) -> None:
        if isinstance(previous, str | bytes):
            raise ConfigurationError("Keyring(previous=...) takes a list of keys, not one key")
        self._current = _Key(_key_bytes(key))
        self._keys = {self._current.key_id: self._current}
        for old in previous:
            found = _Key(_key_bytes(old))
            self._keys.setdefault(found.key_id, found)

    @staticmethod
    def generate() -> str:
        """A new random key, as URL-safe base64 text (keep it where you keep secrets)."""
        return base64.urlsafe_b64encode(secrets.token_bytes(_KEY_BYTES)).decode("ascii")

    @classmethod
    def from_env(cls, name: str = ENV_VAR) -> Keyring | None:
        """The keyring in environment variable ``name``; ``None`` if it is unset or empty.

        The variable holds the current key, then any previous ones, separated by
        commas (``NEW,OLD``).

        Raises:
            ConfigurationError: If a key in it is not a key.
        """
        text = os.environ.get(name, "").strip()
        if not text:
            return None
        current, *previous = (part for part in text.split(",") if part.strip())
        return cls(current, previous=previous)

    @property
    def key_id(self) -> str:
        """The id of the current key (8 hex digits; it reveals nothing of the key)."""
        return self._current.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of every key held, the current one first."""
        return tuple(self._keys)

    def seal(self, plaintext: bytes, context: bytes) -> str:
        """``plaintext`` sealed under the current key, bound to ``context`` (a token)."""
        key = self._current
        nonce = os.urandom(_NONCE_BYTES)
        sealed = key.cipher.encrypt(nonce, plaintext, context)
        body = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
        return f"{PREFIX}{key.key_id}:{body}"

    def holds(self, key_id: str) -> bool:
        """Whether the keyring holds the key of id ``key_id``."""
        return key_id in self._keys

    def open(self, key_id: str, body: str, context: bytes) -> bytes:
        """The plaintext of a token's ``body``, sealed under ``key_id`` for ``context``.

        Raises:
            KeyError: If the keyring does not hold that key.
            ValueError: If the body is damaged, or was sealed for another context.
        """
        key = self._keys[key_id]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"not base64: {exc}") from None
        if len(raw) <= _NONCE_BYTES:
            raise ValueError("too short")
        try:
            opened: bytes = key.cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context)
        except Exception as exc:  # cryptography's InvalidTag: damaged, or another context
            raise ValueError(type(exc).__name__) from None
        return opened

    def digest(self, value: int) -> int:
        """A state's 64-bit digest keyed under the current key (what is stored)."""
        return self._current.digest(value)

    def digests(self, value: int) -> frozenset[int]:
        """The keyed forms of a digest under every key held (what a stored one may be)."""
        return frozenset(key.digest(value) for key in self._keys.values())

    def __repr__(self) -> str:
        others = len(self._keys) - 1
        tail = f" and {others} previous" if others else ""
        return f"<Keyring key {self.key_id}{tail}>"

    def __reduce__(self) -> Any:
        raise TypeError("a Keyring is not pickled: its keys would be written out")
