"""Serve agents to other agents and services: the A2A protocol, durable.

Install the extra (``pip install 'arkhon-rheo[a2a]'``) and mount the app
`a2a_app` returns in your ASGI service, or run ``arkhon-rheo serve``
(`serve_a2a`). An A2A context is a session, a task the turn one message
began; tasks are read from the store, so any replica answers for any task.
Importing this package needs nothing beyond the library.
"""

from __future__ import annotations

from .._exports import publish
from ._app import a2a_app as a2a_app
from ._run import serve_a2a as serve_a2a
from ._served import Served as Served

__all__ = ["Served", "a2a_app", "serve_a2a"]

publish(__name__, __all__, globals())
del publish
