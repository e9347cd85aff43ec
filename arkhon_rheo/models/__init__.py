"""Model clients: OpenAI-compatible chat completions, Anthropic's Messages, costs, rate limits.

`OpenAIChatClient` and `AnthropicClient` implement the `StreamingModelClient`
protocol of ``arkhon_rheo.protocols`` over HTTP (httpx, their streams read
through httpx-sse), raising the library's classified errors; `Pricing` and
`cost` price a call's `Usage`. For tests, the scripted
`arkhon_rheo.testing.ScriptedModel` implements the same protocol.

`RateGovernor` paces model calls per model key (`RateLimit`: requests and
tokens per minute) for every session of a process, and makes them all wait
out a server's 429 together; `governed` wraps any client with one.
"""

from __future__ import annotations

from .._exports import publish
from ._anthropic import ANTHROPIC_VERSION as ANTHROPIC_VERSION
from ._anthropic import DEFAULT_ANTHROPIC_BASE_URL as DEFAULT_ANTHROPIC_BASE_URL
from ._anthropic import DEFAULT_ANTHROPIC_MODEL as DEFAULT_ANTHROPIC_MODEL
from ._anthropic import AnthropicClient as AnthropicClient
from ._governed import GovernedClient as GovernedClient
from ._governed import governed as governed
from ._governed import governing as governing
from ._governor import Permit as Permit
from ._governor import RateGovernor as RateGovernor
from ._governor import default_governor as default_governor
from ._governor import set_default_governor as set_default_governor
from ._governor_lane import LaneStatistics as LaneStatistics
from ._governor_limit import RateLimit as RateLimit
from ._governor_limit import current_priority as current_priority
from ._governor_limit import rate_priority as rate_priority
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
    "GovernedClient",
    "LaneStatistics",
    "ModelPrice",
    "OpenAIChatClient",
    "Permit",
    "Pricing",
    "RateGovernor",
    "RateLimit",
    "cost",
    "current_priority",
    "default_governor",
    "governed",
    "governing",
    "rate_priority",
    "set_default_governor",
]

publish(__name__, __all__, globals())
del publish
