"""The pure core of a session: the kernel a session and its readers share, no event loop in sight.

Patch validation (`PatchValidator`), the event codec (`EventCodec`), the state
digest (`StateHasher`), the machine's fingerprint, the float checks, the fold
of a session's events (`fold`, `apply_event`), the keyring and sealed values,
and what a stopped session waits for. Everything here is plain functions and
objects over `arkhon_rheo.protocols`: nothing runs a task, awaits or imports
anyio, so it is tested without a backend. The session (`arkhon_rheo.session`:
the compiled machine, the supervisor, the agent system), the CLI and the
inspector are built on it.

How states become bytes, in one place:

1. **Canonical JSON** (in `arkhon_rheo.protocols`): a set has no fixed
   order, so wherever a value may hold one (`may_hold_sets`) it is written in
   its canonical form, every set a list sorted by its items' JSON
   (`canonical`, `json_data`); two processes then record, compare and digest
   it alike. Recorded calls (`record_call`) use the same form.
2. **The codec** (`EventCodec`): each state field is turned into JSON
   through its own field's ``TypeAdapter`` (``History[X]`` items through the
   item type's), so what comes back validates exactly like a patch and folds,
   with `apply_event`, to the state the supervisor committed. A state is
   JSON data (`EventCodec.encode_state`) or compact bytes
   (`EventCodec.state_json`, an `EncodedJson`); an event is a `StoredEvent`
   (`EventCodec.encode_event`, `EventCodec.decode_event`).
3. **Float checks**: pydantic writes NaN and the infinities as
   ``null``, which a store must refuse; only fields whose type may serialize a
   float (`may_hold_floats`) are looked at again, with the exact encoder.
4. **The digest** (`StateHasher`): a commit turns each value it
   writes into JSON once (`StateHasher.encode` gives an `EncodedPatch`); the
   state's 64-bit digest is chained over those very bytes (a sequence field's
   digest over its items, so an append costs the appended items only), and
   every stored event carries the digest of the state it left, which replay
   verification (`arkhon_rheo.system`) checks event by event.
5. **Encoded values** (in `arkhon_rheo.protocols`): `EncodedPatch` (a
   patch whose values are JSON bytes already) and `EncodedJson` (a snapshot's
   bytes) travel to a store that sets ``takes_encoded = True`` as they are;
   any other store gets plain JSON data (`EncodedPatch.data`), as the `Store`
   protocol promises.
6. **Rows** (in `arkhon_rheo.store`): the package's stores splice those
   bytes into compact rows: an event's repeating *shape* (kind, stage, states,
   read and write sets, the names its patch writes) kept once per store and
   its patch as the JSON array of its values; snapshots over a size
   zlib-compressed. The row format is the store's own, so it lives there.

7. **Sealed values** (`Keyring`): a machine whose state has
   `Sensitive` fields stores each session through a `SealedCodec`, the
   machine's codec with the session's `Sealer`: each sensitive value leaves
   as a token sealed with the application's `Keyring` (AES-256-GCM, bound to
   the session and the field), and is opened before it is validated. The
   digest is chained over the plaintext, as in 4, and stored keyed.

The fingerprint is the machine's side of the same story: a
stored session names the machine (its version, each state field's JSON schema,
states, transitions) whose codec wrote it. A later machine reads it if what
changed is compatible (compared field by field) or covered by its upgrades
(`Upgrade`: applied to the stored JSON as it is loaded); anything
else is a configuration error naming what differs, rather than a value that
"does not validate". States of an earlier form are digested from their
stored JSON alone, so replay still verifies an upgraded session.
"""

from __future__ import annotations

from .._exports import publish
from ._fold import apply_event as apply_event
from ._fold import fold as fold
from ._keyring import Keyring as Keyring

__all__ = ["Keyring", "apply_event", "fold"]

publish(__name__, __all__, globals())
del publish
