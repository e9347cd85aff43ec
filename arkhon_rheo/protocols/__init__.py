"""Data contracts and interfaces shared by every layer.

This layer imports nothing from the rest of the package. The agent contracts
(state, patch, stage contract, machine, events, and the ``ModelClient``,
``Store`` and ``Tool`` protocols) live here as they are built.
"""

from __future__ import annotations

__all__: list[str] = []
