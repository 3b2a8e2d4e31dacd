"""The runtime without litellm (issue 24.6): litellm is the extra `fems-runtime[litellm]`, so a
vendored module's runtime plays offline and over the OpenAI protocol without it, prices and
windows come from the runtime's own copy of the model table, and a provider that needs
litellm is a run error naming the extra. Each check runs in a fresh interpreter in which
``import litellm`` fails, as it does where litellm is not installed."""

from __future__ import annotations

import json
from pathlib import Path

from fems_helpers import python_output
from fems_runtime.prices import (
    SHIPPED_TABLE,
    PriceTable,
    Usage,
    litellm_price_file,
    shipped_entries,
    write_table,
)

from fems2py.build import build_file

from .fake_openai import Behaviour, fake_openai

WEREWOLF = Path(__file__).resolve().parents[2] / "examples" / "werewolf"
WITHOUT_LITELLM = "import sys\nsys.modules['litellm'] = None  # `import litellm` fails\n"


def test_the_werewolf_example_plays_offline_without_litellm(tmp_path: Path) -> None:
    module = build_file(WEREWOLF / "werewolf.fems", tmp_path / "werewolf.py").output
    code = WITHOUT_LITELLM + (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('werewolf', {str(module)!r})\n"
        "werewolf = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(werewolf)\n"
        f"result = werewolf.run(model='fems/mock', seed=3, db=':memory:', "
        f"souls={str(WEREWOLF / 'souls.yaml')!r})\n"
        "print(json.dumps([result.status, result.variables['winner'], 'litellm' in sys.modules "
        "and sys.modules['litellm'] is not None]))\n"
    )
    status, winner, loaded = json.loads(python_output(code))
    assert (status, loaded) == ("completed", False)
    assert winner in ("villagers", "werewolves")


def test_openai_protocol_calls_prices_and_windows_need_no_litellm() -> None:
    with fake_openai(Behaviour(text="<think>hm</think>over the SDK")) as server:
        code = WITHOUT_LITELLM + (
            "import asyncio, json\n"
            "from fems_runtime.llm import ModelClient\n"
            "from fems_runtime.offline import OfflineTurn\n"
            "from fems_runtime.prices import SHIPPED_TABLE, model_table_file\n"
            "from fems_runtime.records import RunError\n"
            "client = ModelClient(environ={}, model_map={\n"
            f"    'gpt': {{'model': 'openai/gpt-4o-mini', 'api_base': {server.api_base!r}, "
            "'api_key': 'k'},\n"
            "    'claude': {'model': 'anthropic/claude-3-5-haiku-20241022', 'api_key': 'k'},\n"
            "})\n"
            "async def main():\n"
            "    reply = await client.complete(client.resolve('gpt'), [], OfflineTurn('a', '@x'))\n"
            "    try:\n"
            "        await client.complete(client.resolve('claude'), [], OfflineTurn('a', '@x'))\n"
            "        error = None\n"
            "    except RunError as failure:\n"
            "        error = str(failure)\n"
            "    await client.aclose()\n"
            "    return reply, error\n"
            "reply, error = asyncio.run(main())\n"
            "print(json.dumps([reply.text, reply.reasoning, reply.cost, "
            "client.window(client.resolve('gpt')), error, model_table_file() == SHIPPED_TABLE]))\n"
        )
        text, reasoning, cost, window, error, shipped = json.loads(python_output(code))
    entry = json.loads(SHIPPED_TABLE.read_text(encoding="utf-8"))["gpt-4o-mini"]
    assert (text, reasoning, shipped) == ("over the SDK", "hm", True)
    assert cost == 11 * entry["input_cost_per_token"] + 7 * entry["output_cost_per_token"]
    assert window == entry["max_input_tokens"]
    assert error == (
        "model anthropic/claude-3-5-haiku-20241022: this provider is served through litellm, "
        "which is not installed (pip install 'fems-runtime[litellm]')"
    )


def test_the_shipped_table_keeps_chat_models_and_the_fields_read() -> None:
    table = {
        "sample_spec": {"mode": "one of chat, embedding …", "max_input_tokens": "a number"},
        "gpt-x": {
            "mode": "chat",
            "input_cost_per_token": 1e-06,
            "output_cost_per_token": 2e-06,
            "max_input_tokens": 1000,
            "supports_vision": True,
            "litellm_provider": "openai",
        },
        "embed-x": {"mode": "embedding", "input_cost_per_token": 1e-07},
        "free/local": {"mode": "chat", "max_output_tokens": 512},
    }
    assert shipped_entries(table) == {
        "free/local": {"max_output_tokens": 512},
        "gpt-x": {
            "input_cost_per_token": 1e-06,
            "output_cost_per_token": 2e-06,
            "max_input_tokens": 1000,
        },
    }


def test_the_shipped_table_is_read_as_litellms_is(tmp_path: Path) -> None:
    """The copy is laid out as litellm's file, so one model's entry is found without
    decoding the rest; it was refreshed from the installed litellm's file."""
    target = tmp_path / "table.json"
    write_table(
        {
            "a": {"input_cost_per_token": 0.5, "output_cost_per_token": 1.0},
            "b/c": {"max_input_tokens": 9},
        },
        target,
    )
    assert PriceTable(target).cost("a", Usage(2, 3)) == 4.0
    assert PriceTable(target).entry("provider/b/c") == {"max_input_tokens": 9}
    assert PriceTable(target).entry("c") is None
    source = litellm_price_file()
    assert source is not None
    litellm_table = json.loads(source.read_text(encoding="utf-8"))
    shipped = PriceTable(SHIPPED_TABLE)
    for model in ("gpt-4o-mini", "claude-haiku-4-5", "deepseek/deepseek-chat"):
        expected = shipped_entries({model: litellm_table[model]})[model]
        assert shipped.entry(model) == expected, "run: python -m fems_runtime.prices --refresh"
