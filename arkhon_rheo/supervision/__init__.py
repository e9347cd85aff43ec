"""Session supervision: patch validation, machine checking, failure handling.

Built on `arkhon_rheo.actors` and `arkhon_rheo.protocols` only.
"""

from __future__ import annotations

__all__: list[str] = []
