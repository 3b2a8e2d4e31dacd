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
import functools
import json
import os
import re
import ssl
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from fems_runtime.imports import import_large, large_imports
from fems_runtime.prices import Usage

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


OPENAI_COMPATIBLE: Mapping[str, Provider] = {
    "openai": Provider(
        "https://api.openai.com/v1", ("OPENAI_BASE_URL", "OPENAI_API_BASE"), ("OPENAI_API_KEY",)
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


@dataclass(frozen=True)
class Reply:
    """One answer, whichever path it took: text, usage, and the message as JSON (its
    `tool_calls` and anything else a caller may need)."""

    text: str
    usage: Usage
    message: Mapping[str, Any] | None = None


class ModelCallError(Exception):
    """A failed request, described the same way on both paths.

    ``kind``: ``status`` (HTTP error), ``timeout``, ``connection``, ``malformed`` (an answer
    that is not a chat completion), ``key`` (no API key) or ``other``.
    """

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after
        super().__init__(self.describe())

    @property
    def transient(self) -> bool:
        """Whether another attempt may succeed (§15.4: rate limits, 5xx, timeouts, dropped
        connections, malformed answers); authentication and other errors fail at once."""
        if self.kind == "status":
            return self.status in TRANSIENT_STATUS
        return self.kind in ("timeout", "connection", "malformed")

    def describe(self) -> str:
        """The error as the run reports it (after ``model NAME: ``)."""
        text = self.detail if len(self.detail) <= 300 else self.detail[:300] + "…"
        if self.kind == "status":
            hint = " (check the API key)" if self.status in AUTH_STATUS else ""
            return f"HTTP {self.status}: {text}{hint}"
        if self.kind == "malformed":
            return f"malformed answer: {text}"
        return text


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


def reply_of(completion: Any) -> Reply:
    """The `Reply` in a chat completion: the JSON body (the `openai` path) or litellm's
    response object, turned into that JSON shape. The message is kept as JSON (a dict with
    `content`, `tool_calls` …), the same on both paths."""
    if not isinstance(completion, Mapping):
        dump = getattr(completion, "model_dump", None)
        completion = dump() if callable(dump) else None
    try:
        message = completion["choices"][0]["message"]
        text = message.get("content") or ""
    except (AttributeError, IndexError, KeyError, TypeError) as error:
        raise ModelCallError("malformed", f"no message in the answer ({error!r})") from None
    if not isinstance(text, str):
        raise ModelCallError("malformed", "the message content is not text")
    return Reply(text, _usage(completion.get("usage")), dict(message))


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, Mapping):
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Usage(
        prompt if isinstance(prompt, int) else None,
        completion if isinstance(completion, int) else None,
        cached if isinstance(cached, int) else 0,
    )


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


def _provider_of(model: str) -> tuple[str | None, str]:
    """(provider, name) of a litellm model string: `groq/llama3` → (groq, llama3)."""
    prefix, slash, rest = model.partition("/")
    return (prefix, rest) if slash and rest else (None, model)


def openai_route(
    model: str, options: Mapping[str, Any], environ: Mapping[str, str]
) -> OpenAIRoute | None:
    """The route of a model through the `openai` SDK, or None when litellm must serve it.

    **Decision:** a model with an `api_base` whose prefix is not a known OpenAI-compatible
    provider is requested under its full name (`meta-llama/Llama-3` on a vLLM server), except
    for the providers with their own protocol (`NATIVE_PROTOCOL`), which stay with litellm.
    """
    provider_name, name = _provider_of(model)
    explicit_base = options.get("api_base") or options.get("base_url")
    custom = options.get("custom_llm_provider")
    if isinstance(custom, str) and custom:
        provider_name, name = custom, (name if provider_name == custom else model)
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
        if k not in CLIENT_OPTIONS and k not in LITELLM_ONLY_OPTIONS
    }
    return OpenAIRoute(
        base_url=str(base_url).rstrip("/"),
        api_key=str(key) if key else None,
        model=name,
        fields=fields,
        headers=options.get("extra_headers"),
        organization=options.get("organization"),
    )


def missing_key(model: str, route: OpenAIRoute) -> str | None:
    """The environment variable to set when ``route`` needs a key it does not have."""
    provider = OPENAI_COMPATIBLE.get(_provider_of(model)[0] or "")
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
    hide = () if with_aiohttp else ("aiohttp",)
    return import_large("openai", hide=hide, defer=("openai.types",))


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

    async def send(
        self,
        route: OpenAIRoute,
        messages: list[dict[str, Any]],
        timeout: float,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> Reply:
        """One chat completion request (offering ``tools``, §15.5); any failure is a
        `ModelCallError`.

        The body goes out as plain JSON through the client's `post` (the SDK's way to any
        endpoint): `chat.completions.create` would walk every message through its typed-dict
        transform and build pydantic models of the answer, milliseconds per call that grow with
        the context. Auth, connection pool, timeouts and errors are the SDK's all the same.
        """
        openai = import_openai()
        client = self.client(route)
        body = {**route.fields, "model": route.model, "messages": messages}
        options: dict[str, Any] = {"timeout": timeout}
        if route.headers:
            options["headers"] = dict(route.headers)
        if tools:
            body["tools"] = list(tools)
        try:
            completion = await client.post(
                "/chat/completions", body=body, cast_to=object, options=options
            )
        except openai.APIStatusError as error:
            raise ModelCallError(
                "status",
                _body_message(error.body) or error.response.text or str(error),
                status=error.status_code,
                retry_after=parse_retry_after(error.response.headers),
            ) from None
        except openai.APITimeoutError:
            raise ModelCallError("timeout", f"no answer within {timeout:g} s") from None
        except openai.APIConnectionError as error:
            raise ModelCallError("connection", _connection_detail(error)) from None
        except (openai.APIResponseValidationError, json.JSONDecodeError) as error:
            raise ModelCallError("malformed", str(error)) from None
        except openai.OpenAIError as error:
            raise ModelCallError("other", str(error)) from None
        return reply_of(completion)

    async def aclose(self) -> None:
        """Close every pooled client (the end of a run)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


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
_MISSING_CREDENTIALS = re.compile(
    r"missing credentials|api_key client option must be set|missing \w+ api key|no key is set", re.I
)


def import_litellm() -> ModuleType:
    """Import litellm once, with the bundled price map so it never fetches one over the network."""
    global _litellm_module
    if _litellm_module is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # cancelling a call early (`interrupt:`, a decided join) can leave litellm's inner
        # coroutine unawaited; that is the cancellation working, not something to warn about
        warnings.filterwarnings(
            "ignore", r"coroutine '.*\.acompletion' was never awaited", RuntimeWarning
        )
        litellm: Any = import_large("litellm")
        litellm.suppress_debug_info = True
        _litellm_module = litellm
    return _litellm_module


async def litellm_send(
    model: str,
    options: Mapping[str, Any],
    messages: list[dict[str, Any]],
    timeout: float,
    tools: Sequence[Mapping[str, Any]] = (),
) -> Reply:
    """One request through litellm (its own retries off, offering ``tools``, §15.5); any
    failure is a `ModelCallError`."""
    litellm = import_litellm()
    call = {**options, "timeout": timeout, "max_retries": 0}
    if tools:
        call["tools"] = list(tools)
    try:
        response = await litellm.acompletion(model=model, messages=messages, **call)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        raise _litellm_error(error, timeout) from None
    return reply_of(response)


def _litellm_error(error: Exception, timeout: float) -> ModelCallError:
    """litellm's exception as the `openai` path would have described it."""
    text = str(getattr(error, "message", "") or error).strip() or type(error).__name__
    detail = _LITELLM_PREFIX.sub("", text).strip() or text
    if _MISSING_CREDENTIALS.search(text):
        return ModelCallError("key", detail)
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & {"Timeout", "APITimeoutError"} or isinstance(error, TimeoutError):
        return ModelCallError("timeout", f"no answer within {timeout:g} s")
    if detail.startswith("Connection error") or isinstance(error, ConnectionError):
        return ModelCallError("connection", "connection failed")
    if detail.startswith(("Expecting", "Invalid JSON", "Unterminated")):
        return ModelCallError("malformed", detail)
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        retry_after = parse_retry_after(getattr(error, "litellm_response_headers", None))
        if retry_after is None:
            retry_after = parse_retry_after(
                getattr(getattr(error, "response", None), "headers", None)
            )
        return ModelCallError("status", detail, status=status, retry_after=retry_after)
    if names & {"APIConnectionError"}:
        return ModelCallError("connection", "connection failed")
    return ModelCallError("other", detail)
