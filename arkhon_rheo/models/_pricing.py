"""What model calls cost: prices per million tokens, and the cost of one `Usage`.

Adding up usage over a session is the engine's job; this gives it the price.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from ..protocols import Usage

__all__ = ["DEFAULT_PRICING", "ModelPrice", "Pricing", "cost"]


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """A model's prices, in currency units (say USD) per million tokens.

    Prompt tokens read from or written to the provider's prompt cache
    (`Usage.cache_read_tokens`, `Usage.cache_creation_tokens`) are priced at
    ``cache_read`` and ``cache_write`` when given, else at ``input``.

    Attributes:
        input: The price of a million prompt tokens.
        output: The price of a million completion tokens.
        cache_read: The price of a million prompt tokens read from the cache.
        cache_write: The price of a million prompt tokens written to the cache.
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        cached = (self.cache_read, self.cache_write)
        if not (self.input >= 0 and self.output >= 0 and all(p is None or p >= 0 for p in cached)):
            raise ConfigurationError(f"prices must be non-negative numbers, got {self}")

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at these prices."""
        read, written = usage.cache_read_tokens, usage.cache_creation_tokens
        plain = max(0, usage.prompt_tokens - read - written)
        read_price = self.input if self.cache_read is None else self.cache_read
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            plain * self.input
            + read * read_price
            + written * write_price
            + usage.completion_tokens * self.output
        ) / 1e6


class Pricing(Mapping[str, ModelPrice]):
    """Model names to their prices; a dated name finds its family's price.

    ``pricing["gpt-4o-mini-2024-07-18"]`` is the price of ``"gpt-4o-mini"``:
    the longest known name that the asked name starts with.

    Args:
        prices: Model names to a `ModelPrice`, an ``(input, output)`` pair or an
            ``(input, output, cache_read, cache_write)`` quadruple.
    """

    __slots__ = ("_prices",)

    def __init__(
        self,
        prices: Mapping[
            str,
            ModelPrice | tuple[float, float] | tuple[float, float, float | None, float | None],
        ],
    ) -> None:
        self._prices = {
            name: price if isinstance(price, ModelPrice) else ModelPrice(*price)
            for name, price in prices.items()
        }

    def __getitem__(self, model: str) -> ModelPrice:
        if model in self._prices:
            return self._prices[model]
        family = max(
            (name for name in self._prices if model.startswith(name)), key=len, default=None
        )
        if family is None:
            raise KeyError(model)
        return self._prices[family]

    def __iter__(self) -> Iterator[str]:
        return iter(self._prices)

    def __len__(self) -> int:
        return len(self._prices)

    def __repr__(self) -> str:
        return f"Pricing({self._prices!r})"

    def cost(self, usage: Usage, model: str) -> float:
        """What ``usage`` of ``model`` costs.

        Raises:
            ConfigurationError: No price is known for ``model``.
        """
        try:
            price = self[model]
        except KeyError:
            raise ConfigurationError(
                f"no price known for model {model!r} (known: {', '.join(sorted(self)) or 'none'}); "
                "pass a Pricing that names it"
            ) from None
        return price.cost(usage)


#: List prices (USD per million tokens: input, output, cache read, cache write)
#: of a few OpenAI and Anthropic models when this was written. OpenAI bills
#: cached prompt tokens at a discount and writes the cache for free; Anthropic
#: bills cache reads at a tenth of the input price and cache writes (five-minute
#: entries) at 1.25 times it. Long-context and batch prices are not modelled;
#: prices change, so pass your own `Pricing` for accounting that matters.
DEFAULT_PRICING = Pricing(
    {
        "gpt-4o-mini": (0.15, 0.60, 0.075, None),
        "gpt-4o": (2.50, 10.00, 1.25, None),
        "gpt-4.1-nano": (0.10, 0.40, 0.025, None),
        "gpt-4.1-mini": (0.40, 1.60, 0.10, None),
        "gpt-4.1": (2.00, 8.00, 0.50, None),
        "claude-3-haiku": (0.25, 1.25, 0.03, 0.30),
        "claude-3-5-haiku": (0.80, 4.00, 0.08, 1.00),
        "claude-haiku-4-5": (1.00, 5.00, 0.10, 1.25),
        "claude-3-5-sonnet": (3.00, 15.00, 0.30, 3.75),
        "claude-3-7-sonnet": (3.00, 15.00, 0.30, 3.75),
        "claude-sonnet-4": (3.00, 15.00, 0.30, 3.75),
        "claude-sonnet-4-5": (3.00, 15.00, 0.30, 3.75),
        "claude-opus-4": (15.00, 75.00, 1.50, 18.75),
        "claude-opus-4-1": (15.00, 75.00, 1.50, 18.75),
        "claude-opus-4-5": (5.00, 25.00, 0.50, 6.25),
    }
)


def cost(usage: Usage, model: str, pricing: Pricing = DEFAULT_PRICING) -> float:
    """What ``usage`` of ``model`` costs under ``pricing``.

    Raises:
        ConfigurationError: ``pricing`` knows no price for ``model``.
    """
    return pricing.cost(usage, model)
