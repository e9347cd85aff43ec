"""Subgraphs: a machine used as a stage of another, run as a supervised child session.

The stage and its child sessions are run by `arkhon_rheo.session` (the host
that launches a child, the wait of its parent, the session scope a stage finds
its host in); this is their public namespace.
"""

from __future__ import annotations

from ..session import SubgraphStage as SubgraphStage
from ..session import subgraph as subgraph

__all__ = ["SubgraphStage", "subgraph"]
