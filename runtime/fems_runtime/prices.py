"""What a model call cost, and how large a model's window is (§13.2a): a model table read as
data, never by importing litellm.

litellm ships its model table as a JSON file (`model_prices_and_context_window*.json`, 3–4 MB,
about 5,000 models) inside its package. Importing litellm to price a call costs seconds and
~170 MB, and parsing the whole file ~30 ms and ~12 MB, so only the entries of the models a run
uses are looked up and decoded, each once per run: an unknown model is remembered as unknown,
so it costs one failed lookup per run, not one per call.

litellm is an extra of the runtime (`fems-runtime[litellm]`), so the runtime ships its own
copy of the table (`model_table.json`: the chat models, with only the fields read here,
`TABLE_FIELDS`), used when litellm is not installed; litellm's own file, when it is, is newer.
The copy is made from litellm's file by

    python -m fems_runtime.prices --refresh

(litellm installed), run again whenever litellm is upgraded, and committed.

A model-map entry may give its own prices (`input_cost_per_token`, `output_cost_per_token`, as
litellm's call options do), which win over the table: a self-hosted model can have a cost.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

PRICE_FILE_PATTERN = "model_prices_and_context_window*.json"
INDENT = "    "  # the table is written with json.dumps(indent=4): a top-level key is a line
CHUNK = 1 << 18
LONGEST_KEY = 512
LONGEST_ENTRY = 1 << 16
OWN_PRICE_KEYS = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost")
TABLE_FIELDS = (*OWN_PRICE_KEYS, "max_input_tokens", "max_output_tokens")
SHIPPED_TABLE = Path(__file__).with_name("model_table.json")


@dataclass(frozen=True)
class Usage:
    """The token counts of one reply (`None` when the endpoint did not report them)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0  # prompt tokens served from the provider's prompt cache
    reasoning_tokens: int | None = None  # completion tokens the model spent reasoning (§15.4)


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


def model_table_file() -> Path | None:
    """The table to read: litellm's when it is installed, else the runtime's own copy."""
    found = litellm_price_file()
    if found is not None:
        return found
    return SHIPPED_TABLE if SHIPPED_TABLE.is_file() else None


class PriceTable:
    """Per-token prices by litellm model string, each model's entry decoded from the file once.

    The file is scanned in chunks for the model's top-level key (one line of the indented
    JSON), and only that entry is decoded: neither the 3–4 MB text nor the parsed table is
    kept, so pricing adds almost nothing to a run's memory.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._entries: dict[str, Mapping[str, Any] | None] = {}

    def entry(self, model: str) -> Mapping[str, Any] | None:
        """The table's entry for ``model``: the full litellm string, else the name without its
        provider (``openai/gpt-4o-mini`` is priced as ``gpt-4o-mini``)."""
        if model not in self._entries:
            candidates = [model] + ([model.split("/", 1)[1]] if "/" in model else [])
            found = self._find(candidates)
            self._entries[model] = next((found[name] for name in candidates if name in found), None)
        return self._entries[model]

    def _find(self, names: list[str]) -> dict[str, Mapping[str, Any]]:
        """The entries of ``names`` found in one pass over the file."""
        path = self._path or model_table_file()
        if path is None:
            return {}
        keys = {f"\n{INDENT}{json.dumps(name)}: {{".encode(): name for name in names}
        found: dict[str, Mapping[str, Any]] = {}
        try:
            with open(path, "rb") as table:
                offset, tail = 0, b""
                while len(found) < len(names) and (chunk := table.read(CHUNK)):
                    window = tail + chunk
                    for key, name in keys.items():
                        at = window.find(key)
                        if at >= 0 and name not in found:
                            start = offset - len(tail) + at + len(key) - 1
                            entry = _decode_entry(table, start)
                            if entry is not None:
                                found[name] = entry
                    offset += len(chunk)
                    tail = window[-LONGEST_KEY:]
                    table.seek(offset)
        except OSError:
            pass  # no table: the cost is unknown, the run goes on
        return found

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


def _decode_entry(table: BinaryIO, start: int) -> Mapping[str, Any] | None:
    """The JSON object that starts at byte ``start`` of ``table``."""
    table.seek(start)
    text = table.read(LONGEST_ENTRY).decode("utf-8", errors="replace")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


PRICES = PriceTable()
"""The process's table: the file is read on the first priced call, at most once."""


def shipped_entries(table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The entries of litellm's table the runtime ships: chat models, `TABLE_FIELDS` only."""
    entries = {}
    for name, entry in sorted(table.items()):
        if not isinstance(entry, Mapping) or entry.get("mode") != "chat":
            continue
        kept = {key: entry[key] for key in TABLE_FIELDS if isinstance(entry.get(key), int | float)}
        if kept:
            entries[name] = kept
    return entries


def write_table(entries: Mapping[str, Mapping[str, Any]], target: Path) -> None:
    """Write ``entries`` as litellm lays its table out (each model's key at the start of a
    line, indented), one model per line, so `PriceTable` reads either file alike."""
    lines = [f"{INDENT}{json.dumps(name)}: {json.dumps(entry)}" for name, entry in entries.items()]
    target.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def refresh(target: Path = SHIPPED_TABLE) -> int:
    """Make the runtime's copy of the table from litellm's installed one; the number of models."""
    source = litellm_price_file()
    if source is None:
        raise SystemExit("litellm is not installed: pip install 'fems-runtime[litellm]'")
    entries = shipped_entries(json.loads(source.read_text(encoding="utf-8")))
    write_table(entries, target)
    return len(entries)


if __name__ == "__main__":
    if sys.argv[1:] != ["--refresh"]:
        raise SystemExit("usage: python -m fems_runtime.prices --refresh")
    print(f"{SHIPPED_TABLE}: {refresh()} models")
