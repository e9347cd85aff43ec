"""What the layers above `supervision` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). The agent system builds sessions from these: the compiled machine, the
session record and its supervisor, the journal of a stored session, and the
check of a stored log.
"""

from __future__ import annotations

from ._compiled import compiled as compiled
from ._fingerprint import differences as differences
from ._fingerprint import fingerprint as fingerprint
from ._journal import Journal as Journal
from ._journal import out_of_band_event as out_of_band_event
from ._record import EventListener as EventListener
from ._record import Session as Session
from ._supervisor import SessionSupervisor as SessionSupervisor
from ._verify import verify_stored as verify_stored
