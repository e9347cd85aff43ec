"""The inspector: a local web page to watch sessions, decide human gates and verify replays.

Install the extra (``pip install 'arkhon-rheo[inspector]'``) and serve a store
with `serve`, or mount the app `create_app` returns in your own ASGI server.
Pages are rendered on the server and need nothing from the network. It listens
on 127.0.0.1 by default, and every change needs its token.
"""

from __future__ import annotations

from .._exports import publish
from ._serve import create_app as create_app
from ._serve import serve as serve

__all__ = ["create_app", "serve"]

publish(__name__, __all__, globals())
del publish
