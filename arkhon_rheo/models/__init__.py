"""Model clients: an OpenAI-compatible chat-completions client, and what calls cost.

`OpenAIChatClient` implements the `StreamingModelClient` protocol of
``arkhon_rheo.protocols`` over HTTP (httpx), raising the library's classified
errors; `Pricing` and `cost` price a call's `Usage`. For tests, the scripted
`arkhon_rheo.testing.ScriptedModel` implements the same protocol.
"""

from __future__ import annotations

from .._exports import publish
from ._http import ClientState as ClientState
from ._openai import DEFAULT_BASE_URL as DEFAULT_BASE_URL
from ._openai import DEFAULT_MODEL as DEFAULT_MODEL
from ._openai import OpenAIChatClient as OpenAIChatClient
from ._pricing import DEFAULT_PRICING as DEFAULT_PRICING
from ._pricing import ModelPrice as ModelPrice
from ._pricing import Pricing as Pricing
from ._pricing import cost as cost

__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "DEFAULT_PRICING",
    "ClientState",
    "ModelPrice",
    "OpenAIChatClient",
    "Pricing",
    "cost",
]

publish(__name__, __all__, globals())
del publish
