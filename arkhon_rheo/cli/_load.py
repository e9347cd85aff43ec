"""``MODULE:ATTR``: the user's machine, loaded as the command line and the inspector load it.

The loader lives in `arkhon_rheo.protocols` (its ``_seams``), so the inspector,
which may not import the command line, loads machines the same way.
"""

from __future__ import annotations

from ..protocols._seams import load_user_machine as load_machine

__all__ = ["load_machine"]
