"""What the layers above `supervision` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). The agent system builds sessions from these: the session record and
its supervisor, the write of a commit to the store (which a stored session's
journal uses too), and a stage run on its own (which replay verification
re-executes).
"""

from __future__ import annotations

from ._child_wait import ChildWaits as ChildWaits
from ._child_wait import post_child_end as post_child_end
from ._child_wait import take_child_end as take_child_end
from ._inbox import message_record as message_record
from ._persist import Persistence as Persistence
from ._record import EventListener as EventListener
from ._record import Session as Session
from ._record import SessionConfig as SessionConfig
from ._recording import CallPlayback as CallPlayback
from ._recording import CallRecorder as CallRecorder
from ._stages import run_stage as run_stage
from ._supervisor import SessionSupervisor as SessionSupervisor
