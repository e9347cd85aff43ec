"""What the layers above `system` use of its insides: the package's own seams, not API."""

from __future__ import annotations

from ._owner import Owner as Owner
from ._owner import is_dead as is_dead

__all__ = ["Owner", "is_dead"]
