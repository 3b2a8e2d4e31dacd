"""What a model call cost: litellm's bundled price table read as data, never by importing litellm.

litellm ships its price table as a JSON file (`model_prices_and_context_window*.json`, 3–4 MB,
about 5,000 models) inside its package. Importing litellm to price a call costs seconds and
~170 MB, and parsing the whole file ~30 ms and ~12 MB, so the file is read once, as text, and
only the entries of the models a run uses are decoded (each once: unknown models are remembered
as unknown too, so a model without a price costs one failed lookup per run, not one per call).

A model-map entry may give its own prices (`input_cost_per_token`, `output_cost_per_token`, as
litellm's call options do), which win over the table: a self-hosted model can have a cost.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PRICE_FILE_PATTERN = "model_prices_and_context_window*.json"
OWN_PRICE_KEYS = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost")


@dataclass(frozen=True)
class Usage:
    """The token counts of one reply (`None` when the endpoint did not report them)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0  # prompt tokens served from the provider's prompt cache


def litellm_price_file() -> Path | None:
    """litellm's bundled price table, found without importing litellm (None if not installed)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob(PRICE_FILE_PATTERN))
        if found:
            return found[0]
    return None


class PriceTable:
    """Per-token prices by litellm model string, decoded lazily from the table's text."""

    def __init__(self, path: Path | None = None, *, text: str | None = None) -> None:
        self._path = path
        self._text = text
        self._entries: dict[str, Mapping[str, Any] | None] = {}
        self._whole: dict[str, Any] | None = None

    def _table_text(self) -> str:
        if self._text is None:
            path = self._path or litellm_price_file()
            try:
                self._text = path.read_text(encoding="utf-8") if path else ""
            except OSError:
                self._text = ""  # no table: every cost is unknown, the run goes on
        return self._text

    def entry(self, model: str) -> Mapping[str, Any] | None:
        """The table's entry for ``model``: the full litellm string first, then the name
        without its provider (``openai/gpt-4o-mini`` is priced as ``gpt-4o-mini``)."""
        if model not in self._entries:
            self._entries[model] = None
            candidates = [model] + ([model.split("/", 1)[1]] if "/" in model else [])
            for name in candidates:
                found = self._decode(name)
                if found is not None:
                    self._entries[model] = found
                    break
        return self._entries[model]

    def _decode(self, name: str) -> Mapping[str, Any] | None:
        """The JSON object under the top-level key ``name``, or None. The table is indented
        JSON, so a top-level key is a line at the indentation of the first key; a table in
        another layout is parsed whole instead."""
        text = self._table_text()
        layout = re.match(r"\{\n( +)\"", text)
        if layout is None:
            return self._parsed(text).get(name)
        start = text.find(f"\n{layout.group(1)}{json.dumps(name)}: {{")
        if start < 0:
            return None
        try:
            value, _ = json.JSONDecoder().raw_decode(text, text.index("{", start))
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def _parsed(self, text: str) -> dict[str, Any]:
        if self._whole is None:
            try:
                table = json.loads(text) if text else {}
            except json.JSONDecodeError:
                table = {}
            self._whole = table if isinstance(table, dict) else {}
        return self._whole

    def cost(
        self, model: str, usage: Usage, own_prices: Mapping[str, Any] | None = None
    ) -> float | None:
        """The call's cost in USD, as litellm computes it for a chat reply (uncached prompt
        tokens, cached prompt tokens at the cache-read price, completion tokens); None when the
        model has no price or the endpoint reported no usage."""
        if usage.prompt_tokens is None or usage.completion_tokens is None:
            return None
        prices: dict[str, Any] = dict(self.entry(model) or {})
        prices.update({k: v for k, v in (own_prices or {}).items() if k in OWN_PRICE_KEYS})
        input_price = prices.get("input_cost_per_token")
        output_price = prices.get("output_cost_per_token")
        if not isinstance(input_price, int | float) or not isinstance(output_price, int | float):
            return None
        cached = min(max(usage.cached_tokens, 0), usage.prompt_tokens)
        cache_price = prices.get("cache_read_input_token_cost")
        if not isinstance(cache_price, int | float):
            cache_price = input_price
        return (
            (usage.prompt_tokens - cached) * input_price
            + cached * cache_price
            + usage.completion_tokens * output_price
        )


PRICES = PriceTable()
"""The process's table: the file is read on the first priced call, at most once."""
