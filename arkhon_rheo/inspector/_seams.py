"""What the layers above the inspector use of its insides: serving an app safely, not API."""

from __future__ import annotations

from ._serve import _check_address as check_address
from ._serve import _listen as listen
from ._serve import read_token_file as read_token_file
from ._serve import serve_asgi as serve_asgi

__all__ = ["check_address", "listen", "read_token_file", "serve_asgi"]
