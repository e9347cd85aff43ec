"""What the layers above `store` use of its insides: the package's own seams, not API.

The agent system and the command line open a store by its location, a path
or a ``postgresql://`` URL; the command line first looks at what is there
without opening it (`StoreLocation`).
"""

from __future__ import annotations

from ._location import StoreLocation as StoreLocation
