"""What each model of a project is and whether it answers, before a game is started
(`fems2py models`, §15.2): every alias of the model map and every model the script names, what
it resolves to, the path it takes, its window, its reply cap, its price and its concurrency,
each with where it came from; and, on request, one short call to each model the script uses,
timed to its first chunk and its tokens per second, or the exact reason it failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fems_runtime.context import estimate_tokens
from fems_runtime.endpoints import Failure, ModelCallError, openai_route
from fems_runtime.llm import ModelChoice, ModelClient, ensure_known
from fems_runtime.records import RunError
from fems_runtime.replies import ReplyStream
from fems_runtime.serverinfo import ServerFacts

CHECK_MESSAGES = [{"role": "user", "content": "Say hello in one short sentence."}]
CHECK_TOKENS = 32  # the check's reply cap: enough to time, short on any model


@dataclass(frozen=True)
class Said:
    """A setting and where it came from."""

    value: str
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


@dataclass(frozen=True)
class ModelRow:
    """One model of the project as a run would use it."""

    name: str
    model: str
    path: str
    window: Said
    cap: Said
    price: Said
    concurrency: Said
    used: bool


@dataclass(frozen=True)
class CheckResult:
    """One short call: seconds to its first chunk and tokens per second, or why it failed."""

    name: str
    first_chunk: float | None = None
    tokens_per_second: float | None = None
    failure: str | None = None


def describe(
    client: ModelClient, name: str, meta: Mapping[str, object], used: bool = False
) -> ModelRow:
    """The row of ``name`` (an alias or a model string); a broken entry is a `RunError`.
    Its server's facts are those `client.servers` learned (ask it first for them)."""
    choice = client.resolve(None, name)
    options = choice.options
    route = openai_route(choice.model, options, client.environ)
    if route is None:
        ensure_known(choice, client.model_map, client.prices)  # as a run would stop on it
    path = f"openai SDK, {route.base_url}" if route is not None else "litellm"
    if choice.offline:
        return _offline_row(name, choice.model, used)
    return ModelRow(
        name=name,
        model=choice.model,
        path=path,
        window=_window(client, choice),
        cap=_cap(options, meta),
        price=_price(client, choice),
        concurrency=_concurrency(client, choice, meta),
        used=used,
    )


def _offline_row(name: str, model: str, used: bool) -> ModelRow:
    """A built-in model (§15.3) calls nothing: no window, cap, price or slots apply to it, so
    there is no setting to advise."""
    offline = "offline: no call is made"
    return ModelRow(
        name=name,
        model=model,
        path="built in, offline (§15.3)",
        window=Said("none", f"{offline}, nothing is cut"),
        cap=Said("none", f"{offline}, its replies are not cut"),
        price=Said("free", offline),
        concurrency=Said("no limit", f"{offline}, no turn waits"),
        used=used,
    )


def _server(told: ServerFacts) -> str:
    """Where a fact came from, named as the run's notice names it."""
    return f"said by {told.kind}'s server at {told.url}"


def _window(client: ModelClient, choice: ModelChoice) -> Said:
    if choice.options.get("context_window") is not None:
        return Said(f"{choice.options['context_window']} tokens", "model map")
    if (told := client.servers.told(choice)) is not None and told.context_window is not None:
        return Said(f"{told.context_window} tokens", _server(told))
    if (known := client.window(choice)) is not None:
        return Said(f"{known} tokens", "litellm's model table")
    return Said("unknown", "nothing is cut to fit: set context_window")


def _cap(options: Mapping[str, object], meta: Mapping[str, object]) -> Said:
    if isinstance(meta.get("max_tokens"), int):
        return Said(f"max_tokens {meta['max_tokens']}", "the script's meta:, actions may differ")
    if options.get("max_tokens") is not None:
        return Said(f"max_tokens {options['max_tokens']}", "model map")
    return Said("none", "a reply runs until the model stops: set max_tokens")


def _price(client: ModelClient, choice: ModelChoice) -> Said:
    options = choice.options
    if options.get("input_cost_per_token") is not None:
        per_million = float(options["input_cost_per_token"]) * 1e6
        return Said(f"${per_million:g} per million input tokens", "model map")
    entry = client.prices.entry(choice.model) or {}
    if isinstance(entry.get("input_cost_per_token"), int | float):
        per_million = entry["input_cost_per_token"] * 1e6
        return Said(f"${per_million:g} per million input tokens", "litellm's price table")
    return Said("unknown", "counts as free")


def _concurrency(client: ModelClient, choice: ModelChoice, meta: Mapping[str, object]) -> Said:
    if choice.options.get("max_concurrency") is not None:
        return Said(f"{choice.options['max_concurrency']} at once", "model map")
    if (told := client.servers.told(choice)) is not None and told.max_concurrency is not None:
        return Said(f"{told.max_concurrency} at once", _server(told))
    run_cap = meta.get("max_concurrency", 8)
    return Said(f"{run_cap} at once", "the run's max_concurrency")


async def learn_servers(client: ModelClient, names: Sequence[str]) -> None:
    """Ask the local servers of ``names`` what they are, as a run's first turns would."""
    choices = []
    for name in names:
        try:
            choices.append(client.resolve(None, name))
        except RunError:
            continue  # the row reports it
    await asyncio.gather(*(client.servers.learn(choice) for choice in choices))


async def check_model(client: ModelClient, name: str) -> CheckResult:
    """One short streamed call to ``name``, without retries."""
    loop = asyncio.get_running_loop()
    first: list[float] = []

    def heard(kind: str, chunk: str) -> None:
        if chunk and not first:
            first.append(loop.time())

    try:
        choice = client.resolve(None, name)
    except RunError as error:
        return CheckResult(name, failure=error.message)
    if choice.offline:
        return CheckResult(name, first_chunk=0.0)  # answers at once, with no network
    started = loop.time()
    try:
        reply = await client.try_once(
            choice, list(CHECK_MESSAGES), ReplyStream(heard), CHECK_TOKENS
        )
    except RunError as error:
        return CheckResult(name, failure=error.message)
    except ModelCallError as error:
        return CheckResult(name, failure=_reason(error, choice))
    ended = loop.time()
    if not first:
        return CheckResult(name, failure="the model answered with an empty reply")
    tokens = reply.usage.completion_tokens or estimate_tokens(reply.reasoning + reply.text)
    writing = ended - first[0]
    rate = tokens / writing if writing > 0 else None
    return CheckResult(name, first[0] - started, rate)


def _reason(error: ModelCallError, choice: ModelChoice) -> str:
    """Why a call failed, in the words of what to fix."""
    where = choice.server or choice.model
    if error.kind is Failure.CONNECTION:
        return f"could not connect to {where} (is the server running?): {error}"
    if error.kind is Failure.TIMEOUT:
        return f"no answer from {where}: {error}"
    if error.kind is Failure.STATUS and error.status == 404:
        return f"the server does not know model {choice.model} or the path (HTTP 404): {error}"
    if error.kind is Failure.STATUS and error.status in (401, 403):
        return f"the key was refused: {error}"
    return str(error)
