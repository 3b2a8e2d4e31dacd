"""Every model call goes through `ModelClient`: model choice, retries, timeouts, pacing, usage
and cost (§15).

A request goes out through `fems_runtime.endpoints`: the `openai` SDK for the OpenAI protocol,
litellm (imported on its first call) for the other providers. Everything around the request is
here, once, so both paths retry, time out, fail and count the same way. Importing a generated
module, or running it with the offline models of §15.3, imports neither.

Every call streams (§15.4): the reply is put together from its chunks (`fems_runtime.replies`),
its reasoning cut out as it arrives (§13.1) and passed on to the caller's `ReplyStream`; the
timeout is the longest silence, so a slow model that keeps writing is never cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import json
import os
import random
import re
import sys
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fems_runtime.endpoints import (
    Failure,
    ModelCallError,
    OpenAIClients,
    OpenAIRoute,
    close_litellm_clients,
    import_litellm,
    litellm_knows,
    litellm_stream,
    missing_key,
    openai_route,
    openai_stream,
    provider_of,
    speaks_deepseek,
)
from fems_runtime.offline import OFFLINE_MODELS, MockModel, OfflineTurn, ScriptModel
from fems_runtime.prices import PRICES, PriceTable
from fems_runtime.project import ProjectConfig
from fems_runtime.records import RunError, read_input
from fems_runtime.replies import (
    MalformedReply,
    Piece,
    Reply,
    ReplyBuilder,
    ReplyStream,
    split_reasoning,
)
from fems_runtime.serverinfo import OWN_FACTS, LocalServers, ServerFacts
from fems_runtime.tools import ToolCall
from fems_runtime.values import counted

DEFAULT_MODEL = "fems/mock"
#: what a run says, once, when a turn has no model and plays DEFAULT_MODEL (a batch says it
#: again on its own stderr: its workers' go to their log)
FALLBACK_NOTICE = (
    f"fems: no model configured; using the offline model {DEFAULT_MODEL} "
    "(set --model, FEMS_MODEL, meta model or an actor source)"
)
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRY_BUDGET = 120.0
REASONING_EFFORTS = ("low", "medium", "high")


@dataclass(frozen=True)
class ModelChoice:
    """A resolved model: the litellm model string, its call options and the rung that chose it."""

    model: str
    options: Mapping[str, Any] = field(default_factory=dict)
    rung: str = "default"
    offline: bool = field(init=False, repr=False, compare=False)
    """True for the built-in models that never touch the network (read at every turn)."""
    server: str | None = field(init=False, repr=False, compare=False)
    """The entry's own server address (`api_base` or `base_url`), None for the rest (a hosted
    provider's, or one from the environment)."""
    asks_server: bool = field(init=False, repr=False, compare=False)
    """Whether its server is asked what it is (§15.4, `fems_runtime.serverinfo`): an entry with
    an address of its own that leaves its window or its concurrency unsaid."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "offline", self.model in OFFLINE_MODELS)
        base = self.options.get("api_base") or self.options.get("base_url")
        server = str(base).rstrip("/") if isinstance(base, str) and base.strip() else None
        object.__setattr__(self, "server", server)
        asks = server is not None and any(self.options.get(fact) is None for fact in OWN_FACTS)
        object.__setattr__(self, "asks_server", asks)

    @functools.cached_property
    def provider(self) -> str:
        """Who provides it, as its events and traces name it: the entry's `custom_llm_provider`,
        else the model string's prefix (`fems` for the offline models), else `openai`, as
        litellm reads a bare name. Worked out when first asked: only a run's events name it."""
        return provider_of(self.model, self.options)[0] or "openai"


@dataclass(frozen=True)
class CallResult:
    """One completed call: the reply text without its reasoning (§13.1), the tools it calls
    (§15.5), the usage figures stored with the message, and why the reply ended (``length``:
    ``max_tokens`` cut it, §15.4)."""

    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    attempts: int = 1
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None  # prompt tokens the provider's cache served (None: none)


class ContextTooLong(RunError):
    """The provider answered that the request exceeds the model's window (§13.2a): the turn
    retries once with half the context, then reports."""

    def __init__(self, model: str, detail: str) -> None:
        super().__init__(f"model {model}: the request is longer than its context window ({detail})")
        self.model = model
        self.detail = detail


@dataclass(frozen=True)
class RetryPolicy:
    """How transient errors are retried (§15.4): exponential backoff with jitter, or the
    server's `Retry-After` (capped), for as long as the call's time budget lasts."""

    budget: float = DEFAULT_RETRY_BUDGET  # seconds from a call's first attempt to giving up
    base: float = 0.5
    cap: float = 20.0
    retry_after_cap: float = 60.0

    def pause(self, failures: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after the `failures`-th consecutive transient failure: what the
        server asked (at most `retry_after_cap`, plus up to 10% so that callers told the same
        time do not all come back at once), else half to all of the backoff step."""
        if retry_after is not None:
            wait = min(retry_after, self.retry_after_cap)
            return wait + rng.uniform(0, 0.1 * wait)
        step = min(self.cap, self.base * 2.0 ** min(failures - 1, 64))  # no overflow: capped
        return rng.uniform(step / 2, step)


def load_dotenv(path: str | Path, environ: MutableMapping[str, str] | None = None) -> None:
    """Read `KEY=VALUE` lines from a `.env` file without overriding variables already set."""
    environ = os.environ if environ is None else environ
    if not Path(path).exists():
        return
    text = read_input(path, ".env file")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if key and key not in environ:
            environ[key] = value


def _env_alias_key(alias: str) -> str:
    return "FEMS_MODEL_" + re.sub(r"\W", "_", alias, flags=re.ASCII).upper()


def ensure_known(choice: ModelChoice, aliases: Iterable[str], prices: PriceTable) -> None:
    """A model litellm cannot route is a run error before any request: litellm's own says only
    "LLM Provider NOT provided", after the request was built (§15.2). A misspelt alias is the
    likely cause, so the close ``aliases`` are named."""
    if choice.offline or litellm_knows(choice.model, choice.options, prices) is not False:
        return
    message = (
        f"model {choice.model} is neither an alias of the model map (fems.toml [models]) "
        "nor a provider/model string litellm knows (openai/gpt-4o-mini, anthropic/…)"
    )
    close = difflib.get_close_matches(choice.model, list(aliases), n=3, cutoff=0.6)
    if close:
        message += f"; did you mean {' or '.join(repr(alias) for alias in close)}?"
    raise RunError(message)


def no_answer(limit: float, silence: float) -> str:
    """Why an attempt that heard nothing for ``limit`` seconds failed: the model's silence
    limit (``--timeout``, what the user set), and when what was left of the retry budget cut
    the attempt shorter, that too, rounded: a budget's remainder is no figure anyone chose."""
    said = f"no answer within {silence:g} s"
    if round(limit, 1) >= silence:  # cut by a few hundredths at most: not worth a word
        return said
    share = f"{round(limit, 1):g} s" if limit >= 0.05 else "less than 0.1 s"
    return f"{said} (the last attempt: {share}, what was left of the retry budget)"


class SilenceWatch:
    """Ends a stream once it has been silent for ``silence`` seconds (§15.4), on the
    ``asyncio.timeout`` that first waited for its first chunk. A chunk only notes when it came;
    one timer, re-armed for the silence after the latest chunk whenever it finds that one came
    since, does the watching (moving the timeout at every chunk cost ~3.5 µs a chunk)."""

    def __init__(self, limit: asyncio.Timeout, silence: float) -> None:
        self._limit = limit
        self._silence = silence
        self._loop = asyncio.get_running_loop()
        self._last = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.started = False

    def heard(self) -> None:
        """A chunk came: silence counts from now."""
        self._last = self._loop.time()
        if not self.started:  # from the first chunk on, only silence is watched
            self.started = True
            self._limit.reschedule(None)
            self._timer = self._loop.call_at(self._last + self._silence, self._check)

    def close(self) -> None:
        """The stream ended (or was cancelled): nothing left to watch."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        quiet_until = self._last + self._silence
        if self._loop.time() < quiet_until:
            self._timer = self._loop.call_at(quiet_until, self._check)
        else:  # silent for too long: the timeout ends the stream at once
            self._timer = None
            self._limit.reschedule(self._loop.time())


class ModelClient:
    """Resolves models (§15.2) and makes calls with a global in-flight cap and per-model spacing."""

    def __init__(
        self,
        *,
        model_map: Mapping[str, str | Mapping[str, Any]] | None = None,
        meta_model: str | None = None,
        run_model: str | None = None,
        max_concurrency: int = 8,
        delay: float = 0.0,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        seed: int = 0,
        replies: str | Path | Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        notice: Callable[[str], None] | None = None,
    ) -> None:
        self.model_map = dict(model_map or {})
        self.meta_model = meta_model or None
        self.environ = os.environ if environ is None else environ
        self.run_model = run_model or self.environ.get("FEMS_MODEL") or None
        self.delay = float(delay or 0.0)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.mock = MockModel(seed)
        self.script = ScriptModel(replies) if replies is not None else None
        self._notice = notice or (lambda text: print(text, file=sys.stderr))
        self._noticed = False
        self._slots = asyncio.Semaphore(max(1, int(max_concurrency)))
        self._server_slots: dict[str, asyncio.Semaphore] = {}
        self._pacer = _Pacer()
        self._rng = random.Random(seed)
        self._openai = OpenAIClients(width=max(1, int(max_concurrency)))
        self.prices: PriceTable = PRICES
        self._choices: dict[tuple[str | None, str | None], ModelChoice] = {}
        self._routes: dict[int, tuple[ModelChoice, OpenAIRoute | None]] = {}
        self._no_reasoning: set[str] = set()  # models that refused a request to reason
        self._unreachable: set[str] = set()  # addresses that refused a connection (said once)
        self.servers = LocalServers(self._notice, self.environ)  # what local servers say

    @classmethod
    def for_project(
        cls, project: ProjectConfig, load_env: bool = True, **options: Any
    ) -> ModelClient:
        """A client configured from the project's `fems.toml` models and the `.env` files of
        its folders (§15.2); on a conflict the later folder wins."""
        if load_env:
            for folder in reversed(project.folders):  # a .env never overrides: the later first
                load_dotenv(folder / ".env")
        return cls(model_map=dict(project.models), **options)

    def resolve(self, action_model: str | None = None, source: str | None = None) -> ModelChoice:
        """Apply the ladder: action `model:` > actor `source:` > meta.model > --model/FEMS_MODEL
        > offline `fems/mock`. The chosen name is looked up in the model map, then in
        `FEMS_MODEL_<ALIAS>`, and otherwise used as a litellm model string.

        **Decision:** an offline model chosen for the run (`--model fems/mock`, `--model
        fems/script`, `--replies`, or `FEMS_MODEL`) replaces every model of the script, so any
        script, whatever its actors' sources, can be tried and tested without a network.
        Each (action model, source) pair is resolved once per client, that is once per run:
        the model map and the environment are read when a pair is first called for.
        """
        key = (action_model, source)
        choice = self._choices.get(key)
        if choice is None:
            choice = self._choices[key] = self._resolve(action_model, source)
        return choice

    def _resolve(self, action_model: str | None, source: str | None) -> ModelChoice:
        if self.run_model in OFFLINE_MODELS:
            return ModelChoice(self.run_model, {}, "run")
        for rung, name in (
            ("action", action_model),
            ("source", source),
            ("meta", self.meta_model),
            ("run", self.run_model),
        ):
            if name is not None and str(name).strip():
                return self._lookup(str(name).strip(), rung)
        if not self._noticed:
            self._noticed = True
            self._notice(FALLBACK_NOTICE)
        return ModelChoice(DEFAULT_MODEL, {}, "default")

    def _lookup(self, name: str, rung: str) -> ModelChoice:
        entry: str | Mapping[str, Any] | None = self.model_map.get(name)
        if entry is None:
            entry = self.environ.get(_env_alias_key(name))
        if entry is None:
            return ModelChoice(name, {}, rung)
        if isinstance(entry, str):
            return ModelChoice(entry, {}, rung)
        options = dict(entry)
        model = options.pop("model", None)
        if not isinstance(model, str) or not model:
            raise RunError(f"model alias {name!r}: the table needs a 'model' string")
        key_env = options.pop("api_key_env", None)
        if key_env is not None:
            if key_env not in self.environ:
                raise RunError(f"model alias {name!r}: environment variable {key_env} is not set")
            options["api_key"] = self.environ[key_env]
        _check_own_options(name, options)
        return ModelChoice(model, options, rung)

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn | None = None,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        stream: ReplyStream | None = None,
        max_tokens: int | None = None,
        reasoning: str | None = None,
    ) -> CallResult:
        """One model call: offline models answer directly (``turn``: what they know of the
        call; a turn gives it only for them), real ones stream through
        `fems_runtime.endpoints`. ``delay`` is a module's meta.delay; the larger of it and the
        script's applies. ``tools`` are the offered tools' entries of the ``tools`` request
        parameter (§15.5). ``stream`` is filled as the reply arrives (an offline reply at
        once); cancelling the call closes its stream. ``max_tokens`` (an action's or meta's
        cap) wins over the model map's; ``reasoning`` (``deep_think``, §15.7) over the model
        map's ``reasoning``. The first call of an entry with an `api_base` that leaves its
        window or concurrency unsaid asks its server first (§15.4), so a direct caller's calls
        queue on the slots the server says it has, as a turn's do."""
        if choice.model in OFFLINE_MODELS:
            turn = turn or OfflineTurn("", "")  # asked outside a turn: it knows of none
            if tools or turn.tools:  # the offered tools, as the model sees them
                turn = replace(turn, tools=tuple(tool["function"] for tool in tools))
            result = _without_reasoning(self._offline(choice, messages, turn))
            if stream is not None:
                for kind, chunk in ((Piece.REASONING, result.reasoning), (Piece.TEXT, result.text)):
                    if chunk:
                        stream.add(kind, chunk)
            return _numbered(result, messages)
        told = await self.servers.learn(choice)  # once per run: what its local server is
        fields = self._request_fields(choice, max_tokens, reasoning)
        return await self._complete_remote(choice, told, messages, delay, tools, stream, fields)

    def window(self, choice: ModelChoice) -> int | None:
        """The model's context window in tokens (§13.2a): the model map's `context_window`,
        else what its server said (§15.4), else the model's `max_input_tokens` in the bundled
        table, else None (unknown)."""
        own = choice.options.get("context_window")
        if own is None and (told := self.servers.told(choice)) is not None:
            own = told.context_window
        if own is not None:
            return int(own)
        if choice.offline:
            return None
        size = (self.prices.entry(choice.model) or {}).get("max_input_tokens")
        return size if isinstance(size, int) and size > 0 else None

    def _request_fields(
        self, choice: ModelChoice, max_tokens: int | None, reasoning: str | None
    ) -> dict[str, Any]:
        """The call's own request fields: the reply's cap, and reasoning on request (§15.7):
        `reasoning_effort`, and DeepSeek's thinking switch on its provider."""
        fields: dict[str, Any] = {}
        if max_tokens is not None:
            fields["max_tokens"] = int(max_tokens)
        effort = reasoning or choice.options.get("reasoning")
        if effort and choice.model not in self._no_reasoning:
            if effort not in REASONING_EFFORTS:
                raise RunError(
                    f"reasoning must be one of {', '.join(REASONING_EFFORTS)}, not {effort!r}"
                )
            fields["reasoning_effort"] = effort
            if speaks_deepseek(choice.model, choice.options):
                fields["thinking"] = {"type": "enabled"}
        return fields

    def _offline(
        self, choice: ModelChoice, messages: list[dict[str, Any]], turn: OfflineTurn
    ) -> CallResult:
        if choice.model == "fems/mock":
            calls = self.mock.tool_calls(turn, messages)
            text = "" if calls else self.mock.reply(turn, messages)
            return CallResult(text, choice.model, tool_calls=calls)
        if self.script is None:
            raise RunError("model fems/script needs a replies file (--replies FILE)")
        reply = self.script.reply(turn)
        if isinstance(reply, str):
            return CallResult(reply, choice.model)
        return CallResult(reply.text, choice.model, tool_calls=reply.calls)

    async def _complete_remote(
        self,
        choice: ModelChoice,
        told: ServerFacts | None,
        messages: list[dict[str, Any]],
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        stream: ReplyStream | None = None,
        fields: dict[str, Any] | None = None,
    ) -> CallResult:
        """Send the request until it succeeds, a non-transient error ends it, or the retry
        budget (counted from the first attempt) runs out (§15.4). An attempt whose stream
        broke off is discarded from ``stream`` before the next one. ``told``: what the
        model's local server said it is, if it was asked."""
        route = self._route(choice)
        timeout = float(choice.options.get("timeout") or self.timeout)
        loop = asyncio.get_running_loop()
        deadline: float | None = None  # set when the first attempt starts, not while queued
        attempts, refused = 0, False  # refused: an attempt could not connect
        while True:
            attempts += 1
            try:
                async with self._server_slot(choice, told), self._slots:
                    await self._pacer.wait(choice.model, max(self.delay, delay))
                    if deadline is None:
                        deadline = loop.time() + self.retry.budget
                    limit = min(timeout, deadline - loop.time())
                    reply = await self._send(
                        choice, route, messages, limit, tools, stream=stream, fields=fields,
                        told=told,
                    )  # fmt: skip
                return self._result(choice, reply, attempts)
            except ModelCallError as error:
                if stream is not None:
                    stream.discard()
                if fields and self._refused_reasoning(choice, fields, error):
                    attempts -= 1  # the same attempt again, without the fields it refused
                    continue
                stop = _final_error(choice, error)
                if stop is not None:
                    raise stop from None
                where = route.base_url if route is not None else choice.server or choice.model
                refused = refused or error.kind is Failure.CONNECTION
                wait = self.retry.pause(attempts, error.retry_after, self._rng)
                if deadline is None or loop.time() + wait >= deadline:
                    raise RunError(
                        f"model {choice.model}: gave up after {counted(attempts, 'attempt')} "
                        f"({self.retry.budget:g} s retry budget): {error}"
                        + (f" (is the server at {where} running?)" if refused else "")
                        + _asked_to_wait(error.retry_after)
                    ) from None
                if refused and where not in self._unreachable:
                    self._unreachable.add(where)  # said at once, not after the whole budget
                    self._notice(
                        f"fems: model {choice.model}: cannot connect to {where} ({error}); is "
                        f"the server running? Retrying for up to {self.retry.budget:g} s "
                        "(--retry-budget)"
                    )
                await asyncio.sleep(wait)

    def _server_slot(
        self, choice: ModelChoice, told: ServerFacts | None
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """The model map's own cap on calls in flight to one server (§15.4): a local server
        that answers one request at a time queues the others, and a queued request is silence
        that ``--timeout`` would cut, so they wait here instead, before the run's slot. Aliases
        of one ``api_base`` share its cap; without one, what the server said it answers."""
        limit = choice.options.get("max_concurrency")
        if limit is None and told is not None:
            limit = told.max_concurrency
        if limit is None:
            return contextlib.nullcontext()
        server = str(choice.options.get("api_base") or choice.model)
        slots = self._server_slots.get(server)
        if slots is None:
            slots = self._server_slots[server] = asyncio.Semaphore(int(limit))
        return slots

    def _route(self, choice: ModelChoice) -> OpenAIRoute | None:
        """The `openai` SDK route of ``choice`` (None: litellm's), worked out once per choice
        (`resolve` hands out the same choice for the same call site); a missing key is a run
        error. An entry keeps its choice alive, so no other choice can have its ``id``."""
        known = self._routes.get(id(choice))
        if known is not None:
            return known[1]
        route = openai_route(choice.model, choice.options, self.environ)
        if route is None:
            ensure_known(choice, self.model_map, self.prices)
        if route is not None and (variable := missing_key(route)):
            raise RunError(
                f"model {choice.model} has no API key: set {variable} (a .env file next to the "
                "script or in the working directory is read too)"
            )
        self._routes[id(choice)] = (choice, route)
        return route

    async def _send(
        self,
        choice: ModelChoice,
        route: OpenAIRoute | None,
        messages: list[dict[str, Any]],
        timeout: float,
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        stream: ReplyStream | None = None,
        fields: Mapping[str, Any] | None = None,
        told: ServerFacts | None = None,
    ) -> Reply:
        """One streamed request on its path. ``timeout`` is the longest wait for the first
        chunk; between chunks, the model's `timeout` (§15.4: silence, not the whole reply),
        whatever the SDK does. A server known to stream its reading of the prompt is asked to
        (:data:`~fems_runtime.serverinfo.PROGRESS_FIELDS`): its progress chunks carry no reply,
        only a sign of life, so a long prompt read slowly is not a silence."""
        if timeout <= 0:  # the budget ran out while this attempt waited for a slot
            raise ModelCallError(Failure.TIMEOUT, "no time left in the retry budget")
        silence = float(choice.options.get("timeout") or self.timeout)
        # importing the SDK or litellm (seconds, once) is not the endpoint's time
        if route is None:
            import_litellm()
            chunks = litellm_stream(choice.model, choice.options, messages, silence, tools, fields)
        else:
            client = self._openai.client(route)
            if told is not None and told.progress_fields:  # its reading, as chunks
                fields = {**told.progress_fields, **(fields or {})}
            chunks = openai_stream(client, route, messages, silence, tools, fields)
        builder = ReplyBuilder(None if stream is None else stream.add)
        watch: SilenceWatch | None = None
        try:
            async with asyncio.timeout(timeout) as limit, contextlib.aclosing(chunks) as source:
                watch = SilenceWatch(limit, silence)
                try:
                    async for chunk in source:
                        watch.heard()
                        builder.add(chunk)
                finally:
                    watch.close()
        except TimeoutError:
            if watch is not None and watch.started:
                raise ModelCallError(
                    Failure.TIMEOUT, f"the reply stopped for {silence:g} s"
                ) from None
            raise ModelCallError(Failure.TIMEOUT, no_answer(timeout, silence)) from None
        except MalformedReply as error:
            raise ModelCallError(Failure.MALFORMED, str(error)) from None
        return builder.reply()

    async def try_once(
        self, choice: ModelChoice, messages: list[dict[str, Any]], stream: ReplyStream, cap: int
    ) -> Reply:
        """One request of at most ``cap`` tokens, without retries (`fems2py models --check`):
        a failure is the endpoint's `ModelCallError`, or a `RunError` for a missing key."""
        silence = float(choice.options.get("timeout") or self.timeout)
        fields = {"max_tokens": cap}
        told = self.servers.told(choice)
        return await self._send(
            choice, self._route(choice), messages, silence, stream=stream, fields=fields, told=told
        )

    def _refused_reasoning(
        self, choice: ModelChoice, fields: dict[str, Any], error: ModelCallError
    ) -> bool:
        """Whether the model refused the request to reason (it has no reasoning mode): then
        it is a notice, once per model, and the call goes on without it (§15.7)."""
        if (
            "reasoning_effort" not in fields
            or error.kind is not Failure.STATUS
            or error.status != 400
        ):
            return False
        if not re.search(r"reasoning|thinking", error.detail, re.IGNORECASE):
            return False
        fields.pop("reasoning_effort")
        fields.pop("thinking", None)
        if choice.model not in self._no_reasoning:
            self._no_reasoning.add(choice.model)
            self._notice(f"fems: model {choice.model} has no reasoning mode; it answers without")
        return True

    def say_unused_replies(self) -> None:
        """At a run's end: replies that no turn took were given for nothing, since another
        model answered every turn (``--model``, §15.3); a user testing offline learns why."""
        if self.script is not None and not self.script.used:
            self._notice(f"fems: no turn's model was fems/script: {self.script.origin} went unused")

    async def aclose(self) -> None:
        """Release the pooled connections (the end of a run): the SDK clients' and those litellm
        cached for the run's event loop."""
        await self._openai.aclose()
        await close_litellm_clients()

    def _result(self, choice: ModelChoice, reply: Reply, attempts: int) -> CallResult:
        return CallResult(
            text=reply.text,
            model=choice.model,
            prompt_tokens=reply.usage.prompt_tokens,
            completion_tokens=reply.usage.completion_tokens,
            cost=self.prices.cost(choice.model, reply.usage, choice.options),
            attempts=attempts,
            tool_calls=reply_tool_calls(reply.message),
            reasoning=reply.reasoning,
            reasoning_tokens=reply.usage.reasoning_tokens,
            finish_reason=reply.finish_reason,
            cached_tokens=reply.usage.cached_tokens or None,
        )


class _Pacer:
    """Spaces the starts of calls to one model (meta.delay, §3); each model has its own lock
    and time of the last start."""

    def __init__(self) -> None:
        self._last_start: dict[str, tuple[asyncio.Lock, list[float]]] = {}

    async def wait(self, model: str, delay: float) -> None:
        """Hold the start of a call until ``delay`` seconds after the previous start of a call
        to the same model."""
        if delay <= 0:
            return
        lock, last = self._last_start.setdefault(model, (asyncio.Lock(), [float("-inf")]))
        loop = asyncio.get_running_loop()
        async with lock:
            wait = last[0] + delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            last[0] = loop.time()


def _final_error(choice: ModelChoice, error: ModelCallError) -> Exception | None:
    """The run error that ends a call at once (no other attempt can succeed), or None."""
    if error.kind is Failure.CONTEXT:
        return ContextTooLong(choice.model, error.detail)
    if error.kind is Failure.KEY:
        return RunError(
            f"model {choice.model} has no API key: {error.detail} (a .env file next "
            "to the script or in the working directory is read too)"
        )
    if not error.transient:
        return RunError(f"model {choice.model}: {error}")
    return None


def _asked_to_wait(retry_after: float | None) -> str:
    """Why a call gave up before its budget ran out: the server's `Retry-After` was longer
    than what was left of it (§15.4); said, or the quick give-up looks like a bug."""
    if retry_after is None:
        return ""
    return (
        f"; the server asked to wait {retry_after:g} s (Retry-After), longer than what was "
        "left of the retry budget (--retry-budget)"
    )


def _check_own_options(alias: str, options: Mapping[str, Any]) -> None:
    """fems2py's own model-map options (§13.2a, §15.7), and the litellm options it reads
    itself (`max_tokens`, `timeout`: §15.4), are checked when the alias is used."""
    window = options.get("context_window")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window <= 0
    ):
        raise RunError(f"model alias {alias!r}: context_window must be a positive number of tokens")
    for name in ("max_concurrency", "max_tokens"):
        cap = options.get(name)
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
            raise RunError(f"model alias {alias!r}: {name} must be a positive whole number")
    silence = options.get("timeout")
    if silence is not None and (
        isinstance(silence, bool) or not isinstance(silence, int | float) or silence <= 0
    ):
        raise RunError(f"model alias {alias!r}: timeout must be a number of seconds > 0")
    effort = options.get("reasoning")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise RunError(
            f"model alias {alias!r}: reasoning must be one of {', '.join(REASONING_EFFORTS)}"
        )


def _without_reasoning(result: CallResult) -> CallResult:
    """An offline reply with its leading think block cut out, as a streamed one's (§13.1)."""
    reasoning, text = split_reasoning(result.text)
    return result if text is result.text else replace(result, text=text, reasoning=reasoning)


def reply_tool_calls(message: Mapping[str, Any] | None) -> tuple[ToolCall, ...]:
    """The tool calls of a reply message (its JSON, the same from either path); entries that
    are not tool calls are skipped."""
    calls = []
    entries = (message or {}).get("tool_calls") or ()
    for index, call in enumerate(entries if isinstance(entries, list) else ()):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        name = function.get("name") or ""
        calls.append(ToolCall(call.get("id") or f"call_{index}", name, arguments or "{}"))
    return tuple(calls)


def _numbered(result: CallResult, messages: Sequence[Mapping[str, Any]]) -> CallResult:
    """Offline calls get ids unique within the turn's conversation, as a provider's are."""
    if not result.tool_calls:
        return result  # the usual reply: nothing to number, no copy
    calls = tuple(
        replace(call, id=f"call_{len(messages)}_{index}")
        for index, call in enumerate(result.tool_calls)
    )
    return replace(result, tool_calls=calls)
