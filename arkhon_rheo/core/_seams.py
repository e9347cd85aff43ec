"""What the layers above `core` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). The session (`arkhon_rheo.session`) steps with the checks of an edge
and of the invariants and the fold's moves, validates, encodes and digests
what it commits, and reads sessions an earlier form of a machine stored
(`StoredForm`), their sealed values opened first (`opener`); the CLI and the
inspector read a machine's fingerprint and what differs between two, what a
stopped session waits for, and show a session's sensitive values masked.
How a machine reads a stored session (its fingerprint checked, what differs,
how to declare it) is one question, `reading`, which the journal, ``check``,
``show`` and the inspector all ask.
"""

from __future__ import annotations

from ._codec import EventCodec as EventCodec
from ._fingerprint import fingerprint as fingerprint
from ._fingerprint import reading as reading
from ._fingerprint import same_form as same_form
from ._fingerprint import version_of as version_of
from ._floats import may_hold_floats as may_hold_floats
from ._fold import step_moves as step_moves
from ._schemas import item_type as item_type
from ._sealed import Sealer as Sealer
from ._sealed import masked as masked
from ._sealed import opener as opener
from ._sealed import session_codec as session_codec
from ._sealed import shown_state as shown_state
from ._stored_form import StoredForm as StoredForm
from ._waiting import WaitsFor as WaitsFor
from ._waiting import waits_for as waits_for
