"""The pure core of a session: what one `Machine` compiles to, no event loop in sight.

The compiled machine (`_compiled`: built once per machine, kept on it), patch
validation (`PatchValidator`, `_validate`), the event codec (`EventCodec`),
the state digest (`StateHasher`), the machine's fingerprint (`_fingerprint`),
the float checks (`_floats`), the fold of a session's events (`fold`,
`apply_event`) and the in-memory event log (`_eventlog`). Everything here is
plain functions and objects over `arkhon_rheo.protocols`: nothing runs a task,
awaits or imports anyio, so it is tested without a backend. The live
supervisor (`arkhon_rheo.supervision`) and the agent system
(`arkhon_rheo.system`) are built on it.

How states become bytes, in one place:

1. **Canonical JSON** (`arkhon_rheo.protocols._canonical`): a set has no fixed
   order, so wherever a value may hold one (`may_hold_sets`) it is written in
   its canonical form, every set a list sorted by its items' JSON
   (`canonical`, `json_data`); two processes then record, compare and digest
   it alike. Recorded calls (`supervision/_recording.py`) use the same form.
2. **The codec** (`EventCodec`, `_codec`): each state field is turned into JSON
   through its own field's ``TypeAdapter`` (``History[X]`` items through the
   item type's), so what comes back validates exactly like a patch and folds,
   with `apply_event`, to the state the supervisor committed. A state is
   JSON data (`EventCodec.encode_state`) or compact bytes
   (`EventCodec.state_json`, an `EncodedJson`); an event is a `StoredEvent`
   (`EventCodec.encode_event`, `EventCodec.decode_event`).
3. **Float checks** (`_floats`): pydantic writes NaN and the infinities as
   ``null``, which a store must refuse; only fields whose type may serialize a
   float (`may_hold_floats`) are looked at again, with the exact encoder.
4. **The digest** (`StateHasher`, `_digest`): a commit turns each value it
   writes into JSON once (`StateHasher.encode` gives an `EncodedPatch`); the
   state's 64-bit digest is chained over those very bytes (a sequence field's
   digest over its items, so an append costs the appended items only), and
   every stored event carries the digest of the state it left, which replay
   verification (`arkhon_rheo.system`) checks event by event.
5. **Encoded values** (`arkhon_rheo.protocols._encoded`): `EncodedPatch` (a
   patch whose values are JSON bytes already) and `EncodedJson` (a snapshot's
   bytes) travel to a store that sets ``takes_encoded = True`` as they are;
   any other store gets plain JSON data (`EncodedPatch.data`), as the `Store`
   protocol promises.
6. **Rows** (`arkhon_rheo.store._codec`): the package's stores splice those
   bytes into compact rows: an event's repeating *shape* (kind, stage, states,
   read and write sets, the names its patch writes) kept once per store and
   its patch as the JSON array of its values; snapshots over a size
   zlib-compressed. The row format is the store's own, so it lives there.

7. **Sealed values** (`_sealed`, `_keyring`): a machine whose state has
   `Sensitive` fields stores each session through a `SealedCodec`, the
   machine's codec with the session's `Sealer`: each sensitive value leaves
   as a token sealed with the application's `Keyring` (AES-256-GCM, bound to
   the session and the field), and is opened before it is validated. The
   digest is chained over the plaintext, as in 4, and stored keyed.

The fingerprint (`_fingerprint`) is the machine's side of the same story: a
stored session names the machine (its version, each state field's JSON schema,
states, transitions) whose codec wrote it. A later machine reads it if what
changed is compatible (`_schemas` compares field by field) or covered by its
upgrades (`_upgrade`: applied to the stored JSON as it is loaded); anything
else is a configuration error naming what differs, rather than a value that
"does not validate". `_stored_form` digests states of an earlier form from
their stored JSON alone, so replay still verifies an upgraded session.
"""

from __future__ import annotations

from .._exports import publish
from ._fold import apply_event as apply_event
from ._fold import fold as fold
from ._keyring import Keyring as Keyring

__all__ = ["Keyring", "apply_event", "fold"]

publish(__name__, __all__, globals())
del publish
