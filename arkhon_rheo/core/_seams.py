"""What the layers above `core` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). The supervisor steps with the compiled machine's tables, the event log
and the checks of an edge and of the invariants; the agent system, the CLI and
the inspector read a machine's fingerprint and what differs between two, and
what a stopped session waits for, and store (and show) a session's sensitive
values through its sealed codec; the journal reads sessions an earlier form of
a machine stored (`Upgrader`, `read_events`, `StoredForm`), their sealed values
opened first (`opener`), and marks the snapshots it writes for them.
"""

from __future__ import annotations

from ._codec import EventCodec as EventCodec
from ._compiled import CompiledMachine as CompiledMachine
from ._compiled import StatePlan as StatePlan
from ._compiled import compiled as compiled
from ._compiled import with_fields as with_fields
from ._digest import StateDigest as StateDigest
from ._digest import StateHasher as StateHasher
from ._eventlog import EventLog as EventLog
from ._fingerprint import checked_fingerprint as checked_fingerprint
from ._fingerprint import differences as differences
from ._fingerprint import fingerprint as fingerprint
from ._fingerprint import legacy_schema as legacy_schema
from ._fingerprint import same_form as same_form
from ._fingerprint import upgrade_hint as upgrade_hint
from ._fingerprint import version_of as version_of
from ._fold import step_moves as step_moves
from ._sealed import SealedCodec as SealedCodec
from ._sealed import Sealer as Sealer
from ._sealed import is_sealed as is_sealed
from ._sealed import masked as masked
from ._sealed import opener as opener
from ._sealed import session_codec as session_codec
from ._sealed import shown_state as shown_state
from ._sealed_mail import open_message as open_message
from ._sealed_mail import seal_message as seal_message
from ._stored_form import StoredForm as StoredForm
from ._upgrade import UPGRADE as UPGRADE
from ._upgrade import MarkedCodec as MarkedCodec
from ._upgrade import Upgrader as Upgrader
from ._upgrade import form_mark as form_mark
from ._upgrade import mark_of as mark_of
from ._upgrade import read_events as read_events
from ._upgrade import unmarked as unmarked
from ._validate import PatchValidator as PatchValidator
from ._validate import check_edge as check_edge
from ._validate import check_invariants as check_invariants
from ._validate import state_label as state_label
from ._waiting import WaitsFor as WaitsFor
from ._waiting import waits_for as waits_for
