"""The ``arkhon-rheo`` command line: run, list, show, steer and draw stored sessions.

``main(argv)`` is the console script's entry point; every command and its
options are listed by ``arkhon-rheo --help`` and in the docs' command line
reference. `demo_agent` is the machine the ``demo`` command runs, for the
commands that need it (``--machine arkhon_rheo.cli:demo_agent``).
"""

from __future__ import annotations

from .._exports import publish
from ._app import main as main
from ._demo import demo_agent as demo_agent

__all__ = ["demo_agent", "main"]

publish(__name__, __all__, globals())
del publish
