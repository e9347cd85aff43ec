"""Model clients: OpenAI-compatible chat completions, Anthropic's Messages, and what calls cost.

`OpenAIChatClient` and `AnthropicClient` implement the `StreamingModelClient`
protocol of ``arkhon_rheo.protocols`` over HTTP (httpx, their streams read
through httpx-sse), raising the library's classified errors; `Pricing` and
`cost` price a call's `Usage`. For tests, the scripted
`arkhon_rheo.testing.ScriptedModel` implements the same protocol.
"""

from __future__ import annotations

from .._exports import publish
from ._anthropic import ANTHROPIC_VERSION as ANTHROPIC_VERSION
from ._anthropic import DEFAULT_ANTHROPIC_BASE_URL as DEFAULT_ANTHROPIC_BASE_URL
from ._anthropic import DEFAULT_ANTHROPIC_MODEL as DEFAULT_ANTHROPIC_MODEL
from ._anthropic import AnthropicClient as AnthropicClient
from ._http import ClientState as ClientState
from ._openai import DEFAULT_BASE_URL as DEFAULT_BASE_URL
from ._openai import DEFAULT_MODEL as DEFAULT_MODEL
from ._openai import OpenAIChatClient as OpenAIChatClient
from ._pricing import DEFAULT_PRICING as DEFAULT_PRICING
from ._pricing import ModelPrice as ModelPrice
from ._pricing import Pricing as Pricing
from ._pricing import cost as cost

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_ANTHROPIC_MODEL",
    "DEFAULT_BASE_URL",
    "DEFAULT_MODEL",
    "DEFAULT_PRICING",
    "AnthropicClient",
    "ClientState",
    "ModelPrice",
    "OpenAIChatClient",
    "Pricing",
    "cost",
]

publish(__name__, __all__, globals())
del publish
