"""What the layers above `graphs` use of its insides: the package's own seams, not API.

The agent system opens a session scope for each session it launches, in which
the subgraph stages find the host that runs their child sessions.
"""

from __future__ import annotations

from ._host import ChildOutcome as ChildOutcome
from ._host import SubgraphHost as SubgraphHost
from ._host import session_scope as session_scope
