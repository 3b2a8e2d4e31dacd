"""How one request reaches a model (§15.1): the OpenAI protocol through the official `openai`
SDK, every other provider through litellm, both reporting the same `Reply` and the same errors.

Endpoints that speak the OpenAI protocol (`openai/…`, the OpenAI-compatible providers of
`OPENAI_COMPATIBLE`, and any model given an `api_base`) go through one pooled `AsyncOpenAI`
client per base URL and key, and never import litellm (its import costs seconds and ~170 MB).
litellm serves the rest and is imported on its first call. Retries, timeouts, usage and cost
are the caller's (`fems_runtime.llm`), so they are the same on both paths: here a failure
becomes a `ModelCallError` that says whether retrying may help and what `Retry-After` asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import ssl
import sys
import time
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any

from fems_runtime.imports import import_large, large_imports
from fems_runtime.prices import PriceTable
from fems_runtime.replies import WholeAnswer

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
AUTH_STATUS = frozenset({401, 403})


@dataclass(frozen=True)
class Provider:
    """An OpenAI-compatible provider: its default base URL, and the environment variables
    that override the URL and hold the key (first set wins), as litellm reads them."""

    base_url: str | None
    base_env: tuple[str, ...]
    key_env: tuple[str, ...]
    key_required: bool = True


OPENAI_BASE_URL = "https://api.openai.com/v1"
OPENAI_COMPATIBLE: Mapping[str, Provider] = {
    "openai": Provider(
        OPENAI_BASE_URL, ("OPENAI_BASE_URL", "OPENAI_API_BASE"), ("OPENAI_API_KEY",)
    ),
    "deepseek": Provider(
        "https://api.deepseek.com/beta", ("DEEPSEEK_API_BASE",), ("DEEPSEEK_API_KEY",)
    ),
    "groq": Provider("https://api.groq.com/openai/v1", ("GROQ_API_BASE",), ("GROQ_API_KEY",)),
    "together_ai": Provider(
        "https://api.together.ai/v1",
        ("TOGETHER_AI_API_BASE",),
        ("TOGETHER_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHERAI_API_KEY"),
    ),
    "fireworks_ai": Provider(
        "https://api.fireworks.ai/inference/v1",
        ("FIREWORKS_API_BASE",),
        ("FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKSAI_API_KEY"),
    ),
    "xai": Provider("https://api.x.ai/v1", ("XAI_API_BASE",), ("XAI_API_KEY",)),
    "perplexity": Provider(
        "https://api.perplexity.ai",
        ("PERPLEXITY_API_BASE",),
        ("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"),
    ),
    "deepinfra": Provider(
        "https://api.deepinfra.com/v1/openai", ("DEEPINFRA_API_BASE",), ("DEEPINFRA_API_KEY",)
    ),
    "cerebras": Provider(
        "https://api.cerebras.ai/v1", ("CEREBRAS_API_BASE",), ("CEREBRAS_API_KEY",)
    ),
    "sambanova": Provider(
        "https://api.sambanova.ai/v1", ("SAMBANOVA_API_BASE",), ("SAMBANOVA_API_KEY",)
    ),
    "nvidia_nim": Provider(
        "https://integrate.api.nvidia.com/v1", ("NVIDIA_NIM_API_BASE",), ("NVIDIA_NIM_API_KEY",)
    ),
    "openrouter": Provider(
        "https://openrouter.ai/api/v1", ("OPENROUTER_API_BASE",), ("OPENROUTER_API_KEY",)
    ),
    "hosted_vllm": Provider(None, ("HOSTED_VLLM_API_BASE",), ("HOSTED_VLLM_API_KEY",), False),
    "lm_studio": Provider(None, ("LM_STUDIO_API_BASE",), ("LM_STUDIO_API_KEY",), False),
    "litellm_proxy": Provider(None, ("LITELLM_PROXY_API_BASE",), ("LITELLM_PROXY_API_KEY",), False),
}
"""Providers sent through the `openai` SDK: model `PROVIDER/NAME` is requested as `NAME`."""

NATIVE_PROTOCOL = frozenset(
    {
        "anthropic", "azure", "azure_ai", "bedrock", "cohere", "cohere_chat", "databricks",
        "gemini", "huggingface", "ollama", "ollama_chat", "palm", "replicate", "sagemaker",
        "vertex_ai", "watsonx",
    }
)  # fmt: skip
"""Providers with their own protocol: litellm serves them even when given an `api_base`."""

CLIENT_OPTIONS = frozenset({"api_base", "base_url", "api_key", "organization", "extra_headers"})
LITELLM_ONLY_OPTIONS = frozenset(
    {
        "custom_llm_provider", "drop_params", "num_retries", "max_retries", "timeout",
        "api_version", "input_cost_per_token", "output_cost_per_token",
        "cache_read_input_token_cost", "mock_response", "metadata",
    }
)  # fmt: skip
"""Options of litellm's call that are not request fields: never sent to an endpoint."""

FEMS_OPTIONS = frozenset({"context_window", "reasoning", "max_concurrency"})
"""fems2py's own model-map options (§13.2a, §15.4, §15.7): read by the runtime, sent to no one."""

LITELLM_EXTRA = "pip install 'fems-runtime[litellm]'"
LITELLM_UNAWAITED = r"coroutine '\w+\.(acompletion\w*|async_streaming)' was never awaited"
"""What Python warns when a call cancelled early (a timeout, `interrupt:`, a decided join) leaves
a litellm handler's inner coroutine (``acompletion``, ``async_streaming`` …) never awaited."""
STREAM_CHUNK_DEPRECATION = r"Accessing the 'model_\w+' attribute on the instance"
READ_ONLY_TYPED_DICT = r"Item '\w+' on TypedDict class '\w+' is using the `ReadOnly` qualifier"


class Failure(StrEnum):
    """What went wrong with a request, one row each: its name, whether another attempt may
    succeed (§15.4; an HTTP error's status decides for itself), and how the error begins."""

    transient: bool
    lead: str

    def __new__(cls, value: str, transient: bool, lead: str = "") -> Failure:
        member = str.__new__(cls, value)
        member._value_ = value
        member.transient = transient
        member.lead = lead
        return member

    STATUS = "status", False  # an HTTP error: transient by TRANSIENT_STATUS
    TIMEOUT = "timeout", True  # silence (§15.4)
    CONNECTION = "connection", True
    CUT = "cut", True  # a stream that ended before its end
    MALFORMED = "malformed", True, "malformed answer: "  # not a chat completion
    CONTEXT = "context", False  # the request is longer than the model's window (§13.2a)
    KEY = "key", False  # no API key
    SETUP = "setup", False  # a package the path needs is not installed
    OTHER = "other", False


class ModelCallError(Exception):
    """A failed request, described the same way on both paths; ``kind`` a :class:`Failure`."""

    def __init__(
        self,
        kind: Failure | str,
        detail: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.kind = Failure[str(kind).upper()]
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        super().__init__(self.describe())

    @property
    def transient(self) -> bool:
        """Whether another attempt may succeed (§15.4: rate limits, 5xx, timeouts, dropped
        connections, malformed answers); authentication and other errors fail at once."""
        if self.kind is Failure.STATUS:
            return self.status in TRANSIENT_STATUS
        return self.kind.transient

    def describe(self) -> str:
        """The error as the run reports it (after ``model NAME: ``)."""
        text = self.detail if len(self.detail) <= 300 else self.detail[:300] + "…"
        if self.kind is Failure.STATUS:
            hint = " (check the API key)" if self.status in AUTH_STATUS else ""
            return f"HTTP {self.status}: {text}{hint}"
        return f"{self.kind.lead}{text}"


def parse_retry_after(headers: Any) -> float | None:
    """Seconds asked by `Retry-After` (seconds or an HTTP date) or `retry-after-ms`."""
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return max(0.0, float(millis) / 1000)
        value = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # only for the rare date form: the module costs ~40 ms to import

    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


# ---------------------------------------------------------------------- routing


@dataclass(frozen=True)
class OpenAIRoute:
    """A request for the `openai` SDK: where, with which key, which model, which fields."""

    base_url: str
    api_key: str | None
    model: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] | None = None
    organization: str | None = None
    provider: Provider | None = None  # a known OpenAI-compatible provider's (its key rule)


def provider_of(model: str, options: Mapping[str, Any]) -> tuple[str | None, str]:
    """(provider, name it knows the model by) of a litellm model string and its model-map
    options, the one place this is decided: `groq/llama3` → (groq, llama3); the options'
    `custom_llm_provider` wins, and names the model in full unless its prefix is that provider."""
    prefix, slash, rest = model.partition("/")
    provider, name = (prefix, rest) if slash and rest else (None, model)
    custom = options.get("custom_llm_provider")
    if isinstance(custom, str) and custom:
        return custom, (name if provider == custom else model)
    return provider, name


def openai_route(
    model: str, options: Mapping[str, Any], environ: Mapping[str, str]
) -> OpenAIRoute | None:
    """The route of a model through the `openai` SDK, or None when litellm must serve it.

    **Decision:** a model with an `api_base` whose prefix is not a known OpenAI-compatible
    provider is requested under its full name (`meta-llama/Llama-3` on a vLLM server), except
    for the providers with their own protocol (`NATIVE_PROTOCOL`), which stay with litellm.
    """
    provider_name, name = provider_of(model, options)
    explicit_base = options.get("api_base") or options.get("base_url")
    provider = OPENAI_COMPATIBLE.get(provider_name or "")
    if provider is None:
        if not explicit_base or provider_name in NATIVE_PROTOCOL:
            return None
        name = model
    base_url = explicit_base or _first_set(environ, provider.base_env if provider else ())
    base_url = base_url or (provider.base_url if provider else None)
    if not base_url:
        return None  # a self-hosted provider without an address: litellm reports it
    key = options.get("api_key") or _first_set(environ, provider.key_env if provider else ())
    fields = {
        k: v
        for k, v in options.items()
        if k not in CLIENT_OPTIONS and k not in LITELLM_ONLY_OPTIONS and k not in FEMS_OPTIONS
    }
    return OpenAIRoute(
        base_url=str(base_url).rstrip("/"),
        api_key=str(key) if key else None,
        model=name,
        fields=fields,
        headers=options.get("extra_headers"),
        organization=options.get("organization"),
        provider=provider,
    )


def litellm_knows(model: str, options: Mapping[str, Any], table: PriceTable) -> bool | None:
    """Whether litellm can route ``model``, a string on its path that no alias matched (§15.2).

    Decided at once for a provider fems2py knows, an entry that names its provider or address,
    and a bare name of the model table (`gpt-4o-mini`); otherwise litellm's `get_llm_provider`
    decides, which imports litellm, as the call is about to anyway. Without litellm a bare name
    outside the table is unknown; None: a provider's string that only litellm could judge, and
    litellm's absence is reported where it is needed.
    """
    if options.get("custom_llm_provider") or options.get("api_base") or options.get("base_url"):
        return True
    provider, _ = provider_of(model, options)
    if provider is not None and (
        provider == "openai" or provider in OPENAI_COMPATIBLE or provider in NATIVE_PROTOCOL
    ):
        return True
    if provider is None and table.entry(model) is not None:
        return True
    try:
        litellm = import_litellm()
    except ModelCallError:
        return False if provider is None else None
    try:
        litellm.get_llm_provider(model)
    except Exception:  # litellm raises its BadRequestError, or a ValueError on odd strings
        return False
    return True


def speaks_deepseek(model: str, options: Mapping[str, Any]) -> bool:
    """Whether the model is DeepSeek's, which has its own thinking switch (§15.7)."""
    provider = provider_of(model, options)[0]
    base = str(options.get("api_base") or options.get("base_url") or "")
    return provider == "deepseek" or "api.deepseek.com" in base


def missing_key(route: OpenAIRoute) -> str | None:
    """The environment variable to set when ``route`` needs a key it does not have."""
    provider = route.provider
    if route.api_key or provider is None or not provider.key_required:
        return None
    if provider.base_url is not None and route.base_url != provider.base_url.rstrip("/"):
        return None  # an endpoint of one's own (a fake, a proxy): it may take no key
    return provider.key_env[0]


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((environ[name] for name in names if environ.get(name)), None)


# ---------------------------------------------------------------------- the openai SDK


WIDE_RUN = 32
"""From this many calls allowed in flight (`max_concurrency`), the SDK's aiohttp transport
carries the requests (`OpenAIClients`)."""


_openai_module: ModuleType | None = None


def import_openai(*, with_aiohttp: bool = False) -> ModuleType:
    """Import the `openai` SDK (see `fems_runtime.imports`), without its optional aiohttp
    transport unless ``with_aiohttp``.

    The SDK imports aiohttp whenever it is installed (litellm depends on it), for a transport
    used only when asked for; that costs ~11 MB and ~0.4 s of every run's start. The import is
    hidden while the SDK loads (the SDK handles its absence), then unhidden for litellm.
    `openai.types` (the models of every OpenAI API, which requests posted as JSON never use)
    loads only the modules the client imports: its package ``__init__``s, which only
    re-export, run when one of their names is first asked for (`deferred_inits`).
    """
    global _openai_module
    if _openai_module is None:  # once per process: every call asks for it
        hide = () if with_aiohttp else ("aiohttp",)
        _openai_module = import_large("openai", hide=hide, defer=("openai.types",))
    return _openai_module


class OpenAIClients:
    """One `AsyncOpenAI` client per (base URL, key, organization), reused by every call of the
    run: its connection pool keeps connections open between calls. The SDK's own retries are
    off (``max_retries=0``): retries are the caller's, the same on both paths.

    **Decision:** a run that allows `WIDE_RUN` or more calls in flight (``width``) sends them
    through the SDK's aiohttp transport (`openai.DefaultAioHttpClient`) when aiohttp is
    installed, with a pool as large as the run's cap; other runs use the SDK's default httpx
    transport. httpx's pool checks every idle connection whenever a request starts or ends,
    so its cost per request grows with the number of connections (par over 200: ~3.7 ms of
    CPU per request against ~1.2 ms on aiohttp), while importing aiohttp adds ~0.3 s and
    ~11 MB to the start of a run. Both transports raise the SDK's same errors.
    """

    def __init__(self, width: int = 1) -> None:
        self._clients: dict[tuple[str, str | None, str | None], Any] = {}
        self._width = width

    def client(self, route: OpenAIRoute) -> Any:
        """The pooled client for ``route`` (the `openai` package is imported on first use)."""
        key = (route.base_url, route.api_key, route.organization)
        client = self._clients.get(key)
        if client is None:
            wide = self._width >= WIDE_RUN
            openai = import_openai(with_aiohttp=wide)
            # the first client loads the HTTP library's connection code: without h2, whose
            # HTTP/2 the SDK never asks for (~1.4 MB)
            with large_imports(hide=("h2",)):
                client = openai.AsyncOpenAI(
                    api_key=route.api_key or "no-key",
                    base_url=route.base_url,
                    organization=route.organization,
                    max_retries=0,
                    http_client=_http_client(openai, route.base_url, self._width),
                )
            self._clients[key] = client
        return client

    async def aclose(self) -> None:
        """Close every pooled client (the end of a run)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


async def openai_stream(
    client: Any,
    route: OpenAIRoute,
    messages: list[dict[str, Any]],
    timeout: float,
    tools: Sequence[Mapping[str, Any]] = (),
    fields: Mapping[str, Any] | None = None,
) -> AsyncGenerator[Any, None]:
    """One streamed chat completion request on ``client`` (the pooled client of ``route``,
    from `OpenAIClients`), offering ``tools`` (§15.5; ``fields`` are the call's own request
    fields): its chunks as JSON, or one `WholeAnswer` from a server that answers JSON. Any
    failure is a `ModelCallError`; leaving the iteration early (a cancelled call) closes the
    response, so the server sees the connection close.

    The body goes out as plain JSON through the client's `post` (the SDK's way to any
    endpoint): `chat.completions.create` would walk every message through its typed-dict
    transform and build pydantic models of every chunk, costs that grow with the context
    and the reply. Auth, connection pool, timeouts and errors are the SDK's all the same.

    **Decision:** on OpenAI's own endpoint, `max_tokens` is sent as
    `max_completion_tokens`, the name every OpenAI model takes (its reasoning models
    refuse the other); every other endpoint gets `max_tokens`.
    """
    openai = import_openai()
    options: dict[str, Any] = {"timeout": timeout}
    if route.headers:
        options["headers"] = dict(route.headers)
    chunks = None
    try:
        chunks = await client.post(
            "/chat/completions",
            body=_request_body(route, messages, tools, fields),
            cast_to=object,
            options=options,
            stream=True,
            stream_cls=_chunk_stream_class(openai),
        )
        async for chunk in chunks:
            yield chunk
    except (openai.OpenAIError, json.JSONDecodeError) as error:
        failure = _sdk_error(openai, error, timeout)
        if chunks is not None and failure.kind is Failure.CONNECTION:  # the answer had begun
            failure = ModelCallError(Failure.CUT, f"the reply stream broke off ({failure.detail})")
        raise failure from None
    finally:
        if chunks is not None:
            await chunks.close()


def _http_client(openai: ModuleType, base_url: str, width: int) -> Any:
    """The SDK's HTTP client for one base URL: its aiohttp transport with room for ``width``
    connections for a wide run (unless aiohttp is not installed, or the SDK was loaded in this
    process before without it), else its httpx one, with the process's TLS context."""
    tls = _tls_context(openai, plain=base_url.startswith("http://"))
    if width >= WIDE_RUN:
        limits = openai.DEFAULT_CONNECTION_LIMITS
        try:
            return openai.DefaultAioHttpClient(
                verify=tls,
                limits=type(limits)(
                    max_connections=max(width, limits.max_connections or 0),
                    max_keepalive_connections=max(width, limits.max_keepalive_connections or 0),
                ),
            )
        except (AttributeError, RuntimeError):
            pass
    return openai.DefaultAsyncHttpxClient(verify=tls)


@functools.cache
def _tls_context(openai: ModuleType, *, plain: bool) -> ssl.SSLContext:
    """One TLS context per process, shared by every client (each client would make its own,
    reading the CA certificates again: ~30 ms and ~1 MB).

    **Decision:** a plain ``http://`` endpoint (a local server, a proxy) gets a context that
    verifies certificates but trusts none: it never needs TLS, and the CA certificates are not
    read for it. A redirect to ``https://`` then fails its certificate check; it is never sent
    unverified.
    """
    if plain:
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    http_library = sys.modules[type(openai.DEFAULT_CONNECTION_LIMITS).__module__.split(".")[0]]
    return http_library.create_ssl_context()  # the SDK's HTTP library's default, as it would


def _request_body(
    route: OpenAIRoute,
    messages: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    fields: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The JSON body of a streamed request: the route's fields, the call's, the messages."""
    body = {**route.fields, **(fields or {}), "model": route.model, "messages": messages}
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if "max_tokens" in body and route.base_url == OPENAI_BASE_URL:
        body["max_completion_tokens"] = body.pop("max_tokens")
    if tools:
        body["tools"] = list(tools)
    return body


def _sdk_error(openai: ModuleType, error: Exception, timeout: float) -> ModelCallError:
    """The SDK's exception as a `ModelCallError`."""
    if isinstance(error, openai.APIStatusError):
        detail = _body_message(error.body) or error.response.text or str(error)
        if context_exceeded(error.status_code, getattr(error, "code", None), detail):
            return ModelCallError(Failure.CONTEXT, detail, status=error.status_code)
        return ModelCallError(
            Failure.STATUS,
            detail,
            status=error.status_code,
            retry_after=parse_retry_after(error.response.headers),
        )
    if isinstance(error, openai.APITimeoutError):
        return ModelCallError(Failure.TIMEOUT, f"no answer within {timeout:g} s")
    if isinstance(error, openai.APIConnectionError):
        return ModelCallError(Failure.CONNECTION, _connection_detail(error))
    if isinstance(error, openai.APIResponseValidationError | json.JSONDecodeError):
        return ModelCallError(Failure.MALFORMED, str(error))
    return ModelCallError(Failure.OTHER, str(error))


@functools.cache
def _chunk_stream_class(openai: ModuleType) -> type:
    """The SDK's stream of server-sent events, read as fems2py needs it: each event's JSON as
    is (no model built), the end marker (`[DONE]`) required, and a JSON body (a server that
    ignores ``stream``) taken whole."""

    class ChunkStream(openai.AsyncStream[object]):  # type: ignore[name-defined]
        async def __stream__(self) -> AsyncIterator[Any]:
            response = self.response
            try:
                if response.headers.get("content-type", "").startswith("application/json"):
                    yield WholeAnswer(json.loads(await _read_whole(response)))
                    return
                ended = False
                async for event in self._iter_events():
                    if ended:
                        continue  # read to the end, so the connection is reused
                    if event.data.startswith("[DONE]"):
                        ended = True
                        continue
                    yield _event_chunk(event.data)
                if not ended:
                    raise ModelCallError(Failure.CUT, "the reply stream ended before its end")
            finally:
                await response.aclose()

    return ChunkStream


async def _read_whole(response: Any) -> bytes:
    """The body of an answer that came whole, the HTTP library's errors as the SDK's."""
    http = sys.modules[type(response).__module__.split(".")[0]]
    try:
        return bytes(await response.aread())
    except http.TimeoutException:
        raise ModelCallError(Failure.TIMEOUT, "the answer stopped coming") from None
    except http.TransportError as error:
        raise ModelCallError(Failure.CUT, f"the answer broke off ({error})") from None


def _event_chunk(data: str) -> Any:
    """One event's chunk; an error the server sends in the stream ends it."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError as bad:
        raise ModelCallError(
            Failure.MALFORMED, f"a stream event that is not JSON ({bad})"
        ) from None
    failure = chunk.get("error") if isinstance(chunk, dict) else None
    if failure:
        detail = _body_message(chunk) or "an error"
        code = failure.get("code") if isinstance(failure, Mapping) else None
        if context_exceeded(400, code, detail):
            raise ModelCallError(Failure.CONTEXT, detail, status=400)
        raise ModelCallError(Failure.CUT, f"the reply stream ended with {detail}")
    return chunk


_CONTEXT_EXCEEDED = re.compile(
    r"context[_ ]length|context window|context size|maximum context|prompt is too long"
    r"|too many tokens|input is too long|reduce the length",
    re.IGNORECASE,
)


def context_exceeded(status: int | None, code: Any, detail: str) -> bool:
    """Whether an error answer says the request is longer than the model's window (OpenAI's
    ``context_length_exceeded``, and how vLLM, llama.cpp and others word it)."""
    if status not in (400, 413):
        return False
    return code == "context_length_exceeded" or _CONTEXT_EXCEEDED.search(detail) is not None


def _body_message(body: Any) -> str | None:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        return str(message) if message else None
    return str(body) if body else None


def _connection_detail(error: BaseException) -> str:
    cause = error.__cause__
    reason = str(cause).strip() if cause is not None else ""
    return f"connection failed: {reason}" if reason else "connection failed"


# ---------------------------------------------------------------------- litellm

_litellm_module: ModuleType | None = None
_LITELLM_PREFIX = re.compile(r"^litellm\.\w+:\s*(?:\w+:\s*)?(?:\w*Exception(?:\s+\w+)?\s*-\s*)?")
_KEY_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]*_API_KEY\b")  # the first a message names
_MISSING_CREDENTIALS = re.compile(
    r"missing credentials|api_key client option must be set|missing \w+ api key|no key is set", re.I
)


def import_litellm() -> ModuleType:
    """Import litellm once, with the bundled price map so it never fetches one over the network;
    without litellm installed (it is the extra `fems-runtime[litellm]`), a `ModelCallError`
    saying what to install."""
    global _litellm_module
    if _litellm_module is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # that is the cancellation working, not something to warn about
        warnings.filterwarnings("ignore", LITELLM_UNAWAITED, RuntimeWarning)
        # litellm reads pydantic attributes of its stream chunks that pydantic 2.11 deprecated
        warnings.filterwarnings("ignore", STREAM_CHUNK_DEPRECATION, DeprecationWarning)
        # pydantic says, when it first reads one of litellm's stream types, that it cannot
        # guard a ReadOnly TypedDict item: litellm's types, nothing a user can act on
        warnings.filterwarnings("ignore", READ_ONLY_TYPED_DICT, UserWarning)
        try:
            litellm: Any = import_large("litellm")
        except ImportError:
            raise ModelCallError(
                Failure.SETUP,
                "this provider is served through litellm, which is not installed "
                f"({LITELLM_EXTRA})",
            ) from None
        litellm.suppress_debug_info = True
        _litellm_module = litellm
    return _litellm_module


async def close_litellm_clients() -> None:
    """Close the connections litellm opened on the running event loop (a run's, at its end).

    litellm caches its HTTP clients across event loops; their aiohttp transport keeps one
    session per loop, with its pooled connections open. The first call on a later loop (the
    next run in the same process) replaces the session of a loop that has ended, which can
    no longer close its sockets: they stay open until the collector finds them, and warn then
    of unclosed sockets. So a run closes the sessions of its own loop while it still runs;
    litellm opens a new one on its next call. Sessions of other loops, and sessions litellm
    was handed rather than made, are left alone; without litellm imported there is none."""
    litellm: Any = _litellm_module
    if litellm is None:
        return
    cached = getattr(getattr(litellm, "in_memory_llm_clients_cache", None), "cache_dict", None)
    if not isinstance(cached, dict):
        return
    loop = asyncio.get_running_loop()
    transports: dict[int, Any] = {}
    for client in list(cached.values()):
        # an SDK client's httpx client is `_client`, litellm's own handler's is `client`
        http = getattr(client, "_client", None) or getattr(client, "client", None)
        transport = getattr(http, "_transport", None)
        session = getattr(transport, "client", None)
        if getattr(session, "_loop", None) is loop and not getattr(session, "closed", True):
            transports[id(transport)] = transport
    for transport in transports.values():
        # a transport closes its session only when it made it; one that cannot close is left
        # to the collector
        with contextlib.suppress(Exception):
            await transport.aclose()


async def litellm_stream(
    model: str,
    options: Mapping[str, Any],
    messages: list[dict[str, Any]],
    timeout: float,
    tools: Sequence[Mapping[str, Any]] = (),
    fields: Mapping[str, Any] | None = None,
) -> AsyncGenerator[Any, None]:
    """One streamed request through litellm (its own retries off, offering ``tools``,
    §15.5): its chunks, as litellm's objects. Any failure is a `ModelCallError`; leaving the
    iteration early closes litellm's stream and its connection."""
    litellm = import_litellm()
    call = {k: v for k, v in options.items() if k not in FEMS_OPTIONS}
    call.update(fields or {})
    call.update(timeout=timeout, max_retries=0, stream=True)
    call["stream_options"] = {"include_usage": True}
    if tools:
        call["tools"] = list(tools)
    try:
        response = await litellm.acompletion(model=model, messages=messages, **call)
    except Exception as error:
        raise _litellm_error(error, timeout) from None
    if not hasattr(response, "__aiter__"):  # a provider litellm answers whole
        yield WholeAnswer(response)
        return
    try:
        async for chunk in response:
            yield chunk
        if getattr(response, "received_finish_reason", "") is None:
            raise ModelCallError(Failure.CUT, "the reply stream ended before its end")
    except ModelCallError:
        raise
    except Exception as error:
        raise _litellm_error(error, timeout) from None
    finally:
        await response.aclose()


def _litellm_error(error: Exception, timeout: float) -> ModelCallError:
    """litellm's exception as the `openai` path would have described it."""
    inner = getattr(error, "original_exception", None)
    if type(error).__name__ == "MidStreamFallbackError" and isinstance(inner, Exception):
        broken = _litellm_error(inner, timeout)  # a stream that broke off part-way: its cause
        return ModelCallError(Failure.CUT, f"the reply stream broke off: {broken.describe()}")
    text = str(getattr(error, "message", "") or error).partition("\nTraceback")[0].strip()
    text = text or type(error).__name__
    detail = _LITELLM_PREFIX.sub("", text).strip() or text
    if _MISSING_CREDENTIALS.search(text):  # litellm's explanation runs long: its variable
        variable = _KEY_VARIABLE.search(text)
        return ModelCallError(Failure.KEY, f"set {variable.group()}" if variable else detail)
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & {"Timeout", "APITimeoutError"} or isinstance(error, TimeoutError):
        return ModelCallError(Failure.TIMEOUT, f"no answer within {timeout:g} s")
    if detail.startswith("Connection error") or isinstance(error, ConnectionError):
        return ModelCallError(Failure.CONNECTION, "connection failed")
    if detail.startswith(("Expecting", "Invalid JSON", "Unterminated")):
        return ModelCallError(Failure.MALFORMED, detail)
    status = getattr(error, "status_code", None)
    if "ContextWindowExceededError" in names or context_exceeded(status, None, detail):
        return ModelCallError(Failure.CONTEXT, detail, status=status)
    if isinstance(status, int):
        retry_after = parse_retry_after(getattr(error, "litellm_response_headers", None))
        if retry_after is None:
            retry_after = parse_retry_after(
                getattr(getattr(error, "response", None), "headers", None)
            )
        return ModelCallError(Failure.STATUS, detail, status=status, retry_after=retry_after)
    if names & {"APIConnectionError"}:
        return ModelCallError(Failure.CONNECTION, "connection failed")
    return ModelCallError(Failure.OTHER, detail)
