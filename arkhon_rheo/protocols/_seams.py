"""What the layers above `protocols` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). These are the running seams behind the contracts: the fault-injection
hooks, the call recorder's context variable, the partial-output hub, the JSON
canonical form and the running session's resources.
"""

from __future__ import annotations

from ._canonical import canonical as canonical
from ._canonical import json_data as json_data
from ._canonical import may_hold_sets as may_hold_sets
from ._encoded import EncodedJson as EncodedJson
from ._encoded import EncodedPatch as EncodedPatch
from ._encoded import QueueAppend as QueueAppend
from ._encoded import Queued as Queued
from ._encoded import parks_on_append as parks_on_append
from ._encoded import queue_append as queue_append
from ._encoded import takes_encoded as takes_encoded
from ._faults import FaultInjector as FaultInjector
from ._faults import current_injector as current_injector
from ._faults import current_session as current_session
from ._faults import enter_session as enter_session
from ._faults import install as install
from ._faults import installed as installed
from ._faults import uninstall as uninstall
from ._frozen import FrozenJson as FrozenJson
from ._frozen import Metadata as Metadata
from ._gates import DECISIONS as DECISIONS
from ._gates import gate_commits as gate_commits
from ._inbox import ScheduledMessage as ScheduledMessage
from ._io import RECORDER as RECORDER
from ._io import Recorder as Recorder
from ._io import aclose_iterator as aclose_iterator
from ._io import call_site as call_site
from ._io import check_json as check_json
from ._io import current_step as current_step
from ._io import record_plain_call as record_plain_call
from ._model import takes_schema as takes_schema
from ._resources import NO_RESOURCES as NO_RESOURCES
from ._resources import counts_opens as counts_opens
from ._resources import current_resources as current_resources
from ._resources import is_async_context_manager as is_async_context_manager
from ._resources import reports_open as reports_open
from ._resources import resources_scope as resources_scope
from ._sensitive import SENSITIVE as SENSITIVE
from ._sensitive import secret_texts as secret_texts
from ._sensitive import sensitive_fields as sensitive_fields
from ._shared import share_fields_set as share_fields_set
from ._stream import _SCOPE
from ._stream import DEFAULT_CAPACITY as DEFAULT_CAPACITY
from ._stream import PartialHub as PartialHub
from ._stream import StageScope as StageScope

#: The context variable `emit` finds the running stage's `StageScope` in.
STAGE_SCOPE = _SCOPE
