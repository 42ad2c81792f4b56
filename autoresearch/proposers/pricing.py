"""LLM prices: the one table that turns tokens into dollars for the ``llm_usd`` budget.

Dollars per million tokens (input, output), list prices; a model is matched by its longest
prefix in the table (up to a ``-``), so dated names (``claude-sonnet-4-5-20250929``) find
their family while ``gpt-5.4`` is not taken for ``gpt-5``. A
model the table does not know takes the study's ``proposer.price``; without one it is priced
at its provider's most expensive entry (counted, never free), or at 0 on a custom
``base_url`` (a local server), and the journal says which.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    # Anthropic
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),  # sonnet 4 and 4.5
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
    # OpenAI
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.4),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.4, 1.6),
    "gpt-4.1-nano": (0.1, 0.4),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "o3": (2.0, 8.0),
    "o4-mini": (1.1, 4.4),
}
PROVIDER_PREFIXES = {"anthropic": ("claude",), "openai": ("gpt", "o3", "o4")}
CACHE_WRITE_FACTOR = 1.25  # Anthropic: cache writes cost 1.25x input, reads 0.1x
CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True)
class ModelPrice:
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    source: str  # table:<prefix> | study | provider-max | local-server

    def usd(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
    ) -> float:
        inp = (
            input_tokens
            + CACHE_WRITE_FACTOR * cache_write_tokens
            + CACHE_READ_FACTOR * cache_read_tokens
        )
        return (inp * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok) / 1e6


def price_for(
    provider: str,
    model: str,
    override: tuple[float, float] | None = None,
    base_url: str | None = None,
) -> ModelPrice:
    if override is not None:
        return ModelPrice(override[0], override[1], "study")
    matches = [p for p in PRICES_USD_PER_MTOK if model == p or model.startswith(p + "-")]
    if matches:
        best = max(matches, key=len)
        inp, out = PRICES_USD_PER_MTOK[best]
        return ModelPrice(inp, out, f"table:{best}")
    if base_url:
        return ModelPrice(0.0, 0.0, "local-server")
    family = [
        v
        for k, v in PRICES_USD_PER_MTOK.items()
        if k.startswith(PROVIDER_PREFIXES.get(provider, ("",)))
    ] or list(PRICES_USD_PER_MTOK.values())
    return ModelPrice(max(v[0] for v in family), max(v[1] for v in family), "provider-max")
