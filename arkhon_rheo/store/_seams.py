"""What the layers above `store` use of its insides: the package's own seams, not API."""

from __future__ import annotations

from ._schema import not_a_file as not_a_file
