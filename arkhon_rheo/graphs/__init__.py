"""Subgraphs: a machine used as a stage of another, run as a supervised child session.

Built on `arkhon_rheo.protocols` and `arkhon_rheo.supervision`; the agent
system, above it, runs the child sessions.
"""

from __future__ import annotations

from .._exports import publish
from ._subgraph import SubgraphStage as SubgraphStage
from ._subgraph import subgraph as subgraph

__all__ = ["SubgraphStage", "subgraph"]

publish(__name__, __all__, globals())
del publish
