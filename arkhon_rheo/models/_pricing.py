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

    Attributes:
        input: The price of a million prompt tokens.
        output: The price of a million completion tokens.
    """

    input: float
    output: float

    def __post_init__(self) -> None:
        if not (self.input >= 0 and self.output >= 0):
            raise ConfigurationError(f"prices must be non-negative numbers, got {self}")

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at these prices."""
        return (usage.prompt_tokens * self.input + usage.completion_tokens * self.output) / 1e6


class Pricing(Mapping[str, ModelPrice]):
    """Model names to their prices; a dated name finds its family's price.

    ``pricing["gpt-4o-mini-2024-07-18"]`` is the price of ``"gpt-4o-mini"``:
    the longest known name that the asked name starts with.

    Args:
        prices: Model names to a `ModelPrice` or an ``(input, output)`` pair.
    """

    __slots__ = ("_prices",)

    def __init__(self, prices: Mapping[str, ModelPrice | tuple[float, float]]) -> None:
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


#: List prices (USD per million tokens) of a few OpenAI models when this was
#: written; prices change, so pass your own `Pricing` for accounting that matters.
DEFAULT_PRICING = Pricing(
    {
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-4o": (2.50, 10.00),
        "gpt-4.1-nano": (0.10, 0.40),
        "gpt-4.1-mini": (0.40, 1.60),
        "gpt-4.1": (2.00, 8.00),
    }
)


def cost(usage: Usage, model: str, pricing: Pricing = DEFAULT_PRICING) -> float:
    """What ``usage`` of ``model`` costs under ``pricing``.

    Raises:
        ConfigurationError: ``pricing`` knows no price for ``model``.
    """
    return pricing.cost(usage, model)
