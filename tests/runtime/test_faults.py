"""§15.4 under fire (issue #10 item 6): a 50-call script run again and again against a fake
endpoint where 30% of the requests fail (500, 503, 429 with Retry-After, connection resets,
malformed JSON, hangs past the request timeout) completes every time, with the same result as a
run without faults. The waits are scaled down (tiny timeout and backoff) to keep the suite fast;
the retry logic is the production one."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, llm_calls, load, read_trace
from fems_runtime.llm import RetryPolicy
from fems_runtime.turns import services as turn_services

from .fake_openai import Behaviour, Faults, fake_openai

WORKERS = [f"@w{i}" for i in range(4)]
SCRIPT = f"""
    vars:
        n = 0
        workers = [{", ".join(WORKERS)}]
        @w = ""
    actors:
        ai @eve = source:endpoint
{chr(10).join(f"        ai {name} = source:endpoint" for name in WORKERS)}
    action work @ai(@w):
        prompt: "You are {{{{@w}}}}. REPLY[[{{{{@w}}}} has done its part.]]"
        scope: [@w]
    action ask @ai(@eve):
        prompt: "Step {{{{n}}}}. REPLY[[Step {{{{n}}}} done. SET VARIABLE: <<n += 1>>]]"
        scope: [@eve]
    mainflow:
        [A]: ask
        [B]: ask
        [START] -> [P] -> par @w in workers:
            -> [W]:work ->
        -> [A] -> [B]
        [B] -> if (n < 46) -> [A]
        [B] -> if (n >= 46) -> [END]
"""
MODELS = {
    "openai": 'model = "openai/fake", api_key = "sk-test"',
    "litellm": 'model = "azure/fake", api_key = "sk-test", api_version = "2024-06-01"',
}
RUNS = {"openai": 20, "litellm": 4}  # litellm costs ~10× more CPU per request: fewer runs
TOGETHER = 5  # runs at a time: the client's own CPU time per burst stays well under the timeout


def outcome(result: Any, trace: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """What must not depend on faults: the final variables, and every reply with its action."""
    replies = sorted((call["action"], call["reply"]) for call in llm_calls(read_trace(trace)))
    return result.variables, replies


@pytest.mark.parametrize("path", sorted(MODELS))
def test_a_50_call_script_survives_30_percent_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setattr(
        turn_services, "RetryPolicy", functools.partial(RetryPolicy, base=0.01, cap=0.05)
    )
    module = load(build_script(tmp_path, SCRIPT))

    async def runs(api_base: str, count: int) -> list[Any]:
        base = api_base.removesuffix("/v1") if path == "litellm" else api_base
        (tmp_path / "fems.toml").write_text(
            f'[models]\nendpoint = {{ {MODELS[path]}, api_base = "{base}" }}\n', encoding="utf-8"
        )
        slots = asyncio.Semaphore(TOGETHER)

        async def run(number: int) -> Any:
            async with slots:
                trace = tmp_path / f"trace{number}.jsonl"
                return await module.PROGRAM.run_async(db=":memory:", trace=trace, timeout=0.5)

        results = await asyncio.gather(*(run(number) for number in range(count)))
        return [outcome(result, tmp_path / f"trace{i}.jsonl") for i, result in enumerate(results)]

    from_prompt = Behaviour(text=None)  # each reply is the prompt's REPLY[[...]]
    with fake_openai(from_prompt) as server:
        (reference,) = asyncio.run(runs(server.api_base, 1))
    assert reference[0]["n"] == 46 and len(reference[1]) == 50

    faults = Faults(rate=0.3, seed=7, hang=3.0, retry_after=0.02)
    with fake_openai(from_prompt, faults) as server:
        outcomes = asyncio.run(runs(server.api_base, RUNS[path]))
        injected = dict(server.injected)
    assert all(result == reference for result in outcomes)
    assert set(injected) == {"500", "503", "429", "reset", "bad_json", "hang"}
    assert sum(injected.values()) >= 0.2 * 50 * RUNS[path]
