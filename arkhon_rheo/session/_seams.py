"""What the layers above `session` use of its insides: the package's own seams, not API.

A subpackage's private modules are its own; another subpackage imports only
its public namespace or this module (the layering test holds every module to
that). The CLI compiles a machine to check how it reads its stored sessions;
the inspector reads a stored session as its machine reads it; the CLI tells a
live owner's lease from a dead one's.
"""

from __future__ import annotations

from ._compiled import compiled as compiled
from ._journal import read_session as read_session
from ._owner import Owner as Owner
from ._owner import is_dead as is_dead
