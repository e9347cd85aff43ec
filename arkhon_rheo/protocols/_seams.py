"""What the layers above `protocols` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). These are the contracts' own helpers the layers share: the JSON
canonical form, the encoded forms a store takes, the frozen metadata, the
gate decisions, the scheduled message, the sensitive-field rules and the
default bound of a subscription. The running seams (the fault hooks, the call
recorder, the scope partial output goes to, the resources of the running
session) live in ``arkhon_rheo._hooks``.
"""

from __future__ import annotations

from ._canonical import canonical as canonical
from ._canonical import check_json as check_json
from ._canonical import json_data as json_data
from ._canonical import may_hold_sets as may_hold_sets
from ._encoded import EncodedJson as EncodedJson
from ._encoded import EncodedPatch as EncodedPatch
from ._encoded import Queued as Queued
from ._encoded import StoreSupport as StoreSupport
from ._frozen import FrozenJson as FrozenJson
from ._frozen import Metadata as Metadata
from ._inbox import ScheduledMessage as ScheduledMessage
from ._model import takes_schema as takes_schema
from ._resources import is_async_context_manager as is_async_context_manager
from ._sensitive import SENSITIVE as SENSITIVE
from ._sensitive import secret_texts as secret_texts
from ._sensitive import sensitive_fields as sensitive_fields
from ._shared import share_fields_set as share_fields_set
