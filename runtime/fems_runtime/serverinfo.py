"""What a model server on one's own machine says it is (§15.4): its window and how many
requests it answers at once, read once per run from the server itself, so a model-map entry of
`model` and `api_base` alone plays as well as one that states them.

Four servers say it, each in its own way: llama.cpp's `/props` (`n_ctx` of a slot, and
`total_slots`), vLLM's `/v1/models` (`max_model_len`), Ollama's `/api/ps` (the context of a
loaded model) or `/api/show` (`num_ctx`, else the model's context length), and LM Studio's
`/api/v0/models` (the loaded or the largest context). They are asked at once, each with a short
timeout; a server that answers none of them is used as it would be without asking. Only an
entry with an `api_base` is asked, never a hosted provider's default address.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.endpoints import openai_route

if TYPE_CHECKING:
    import httpx

PROBE_SECONDS = 2.0
"""How long one question to a server may take: a local server answers in milliseconds."""

OWN_FACTS = ("context_window", "max_concurrency")
"""The entry's options a server can tell, in the words of the model map."""

PROGRESS_FIELDS: Mapping[str, Mapping[str, Any]] = {"llama.cpp": {"return_progress": True}}
"""The servers that stream their reading of a long prompt when a request asks them to, and the
request fields that ask. Without them, a local server on a CPU sends nothing until it has read
the whole prompt (minutes for a long game's), a wait that the first-chunk timeout cuts; with
them, each part it has read is a chunk, a sign of life, and only silence is timed (§15.4)."""


class ModelChoice(Protocol):
    """What a server is asked about: an entry's model string, its options, its own server
    address and whether that is asked (llm.py's ``ModelChoice`` is one, which decides those
    once; llm.py asks this module, so this module does not import it)."""

    @property
    def model(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    @property
    def server(self) -> str | None: ...

    @property
    def asks_server(self) -> bool: ...


@dataclass(frozen=True)
class ServerFacts:
    """What one server said: which server (``kind``), the address that said it, the window of
    one request in tokens and the requests it answers at once (None: not said)."""

    kind: str
    url: str
    context_window: int | None = None
    max_concurrency: int | None = None

    def value(self, option: str) -> int | None:
        """The fact named as the model map names it (`context_window`, `max_concurrency`)."""
        return self.context_window if option == "context_window" else self.max_concurrency

    @property
    def progress_fields(self) -> Mapping[str, Any]:
        """The request fields that make this server stream its reading of a prompt
        (:data:`PROGRESS_FIELDS`); none for a server not known to."""
        return PROGRESS_FIELDS.get(self.kind, {})

    def said(self) -> str:
        """The facts, as a notice lists them: ``context_window 2048, max_concurrency 1``."""
        return ", ".join(
            f"{option} {self.value(option)}"
            for option in OWN_FACTS
            if self.value(option) is not None
        )


def served_name(choice: ModelChoice, environ: Mapping[str, str]) -> str:
    """The model's name as its server knows it: what a request would name."""
    route = openai_route(choice.model, choice.options, environ)
    if route is not None:
        return route.model
    return choice.model.partition("/")[2] or choice.model


async def ask_server(
    api_base: str, model: str, api_key: str | None = None, *, seconds: float = PROBE_SECONDS
) -> ServerFacts | None:
    """Ask the server at ``api_base`` what it is, every way at once; the first of llama.cpp,
    vLLM, Ollama and LM Studio that answered wins. None: no answer told anything (a refused
    connection, an unknown path, a timeout, an answer of another shape)."""
    import httpx

    root = re.sub(r"/v1$", "", api_base.rstrip("/"))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = httpx.Timeout(seconds)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, trust_env=False) as client:
        answers = await asyncio.gather(
            *(_safely(probe(client, root, model), seconds) for probe in PROBES)
        )
    return next((answer for answer in answers if answer is not None), None)


async def _safely(question: Awaitable[ServerFacts | None], seconds: float) -> ServerFacts | None:
    """A question whose failure, whatever it is, only means the server did not say."""
    import httpx

    try:
        async with asyncio.timeout(seconds * 2):
            return await question
    except (httpx.HTTPError, TimeoutError, ValueError, TypeError, KeyError, AttributeError):
        return None


async def _json(client: httpx.AsyncClient, url: str, body: Any = None) -> Any:
    """The JSON of a 200 answer to GET ``url`` (POST with ``body``); None otherwise."""
    answer = await (client.get(url) if body is None else client.post(url, json=body))
    return answer.json() if answer.status_code == 200 else None


def _count(value: Any) -> int | None:
    """A positive whole number, else None (a server's answer is not trusted blindly)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value) if int(value) == value else None


def _entry(entries: Any, model: str, *keys: str) -> Mapping[str, Any] | None:
    """The entry of a model list whose name (``keys``) is ``model``: Ollama adds `:latest`
    to a name written without a tag; a list of one model is that model."""
    found = [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    for entry in found:
        if any(entry.get(key) in (model, f"{model}:latest") for key in keys):
            return entry
    return found[0] if len(found) == 1 else None


async def _llama_cpp(client: httpx.AsyncClient, root: str, model: str) -> ServerFacts | None:
    """llama.cpp's server: `/props` holds a slot's `n_ctx` and `total_slots`."""
    url = f"{root}/props"
    props = await _json(client, url)
    if not isinstance(props, Mapping):
        return None
    settings = props.get("default_generation_settings")
    window = _count(settings.get("n_ctx")) if isinstance(settings, Mapping) else None
    facts = ServerFacts("llama.cpp", url, window or _count(props.get("n_ctx")))
    facts = replace(facts, max_concurrency=_count(props.get("total_slots")))
    return facts if facts.said() else None


async def _vllm(client: httpx.AsyncClient, root: str, model: str) -> ServerFacts | None:
    """vLLM: each model of `/v1/models` has its `max_model_len`."""
    url = f"{root}/v1/models"
    listing = await _json(client, url)
    entry = _entry(listing.get("data"), model, "id") if isinstance(listing, Mapping) else None
    window = _count(entry.get("max_model_len")) if entry is not None else None
    return ServerFacts("vLLM", url, window) if window else None


async def _ollama(client: httpx.AsyncClient, root: str, model: str) -> ServerFacts | None:
    """Ollama: a loaded model's context in `/api/ps` (what it serves), else `/api/show`:
    the `num_ctx` its parameters set, else the model's own context length."""
    url = f"{root}/api/ps"
    running = await _json(client, url)
    if isinstance(running, Mapping):
        entry = _entry(running.get("models"), model, "name", "model")
        window = _count(entry.get("context_length")) if entry is not None else None
        if window:
            return ServerFacts("Ollama", url, window)
    url = f"{root}/api/show"
    shown = await _json(client, url, {"model": model})
    if not isinstance(shown, Mapping):
        return None
    found = re.search(r"^num_ctx\s+(\d+)", str(shown.get("parameters") or ""), re.MULTILINE)
    info = shown.get("model_info")
    lengths = (
        [v for k, v in info.items() if str(k).endswith(".context_length")]
        if isinstance(info, Mapping)
        else []
    )
    window = int(found.group(1)) if found else _count(lengths[0] if lengths else None)
    return ServerFacts("Ollama", url, window) if window else None


async def _lm_studio(client: httpx.AsyncClient, root: str, model: str) -> ServerFacts | None:
    """LM Studio: each model of `/api/v0/models` has its `max_context_length`, and a loaded
    one the `loaded_context_length` it was loaded with."""
    url = f"{root}/api/v0/models"
    listing = await _json(client, url)
    entry = _entry(listing.get("data"), model, "id") if isinstance(listing, Mapping) else None
    if entry is None:
        return None
    window = _count(entry.get("loaded_context_length")) or _count(entry.get("max_context_length"))
    return ServerFacts("LM Studio", url, window) if window else None


Probe = Callable[["httpx.AsyncClient", str, str], Awaitable[ServerFacts | None]]
PROBES: tuple[Probe, ...] = (_llama_cpp, _vllm, _ollama, _lm_studio)
"""The questions, in the order their answers win."""


class LocalServers:
    """The facts of the run's local servers, each asked once, the first time an entry that
    needs them is used (§15.4): concurrent first turns wait for the one question. What the
    entry says always wins; one notice names what was read and where."""

    def __init__(
        self,
        notice: Callable[[str], None],
        environ: Mapping[str, str],
        ask: Callable[..., Awaitable[ServerFacts | None]] = ask_server,
    ) -> None:
        self._notice = notice
        self._environ = environ
        self._ask = ask
        self._asked: dict[tuple[str, str], asyncio.Task[ServerFacts | None]] = {}
        self._facts: dict[tuple[str, str], ServerFacts] = {}

    def _key(self, choice: ModelChoice) -> tuple[str, str]:
        return (choice.server or "", choice.model)

    async def learn(self, choice: ModelChoice) -> ServerFacts | None:
        """Ask the server of ``choice`` once per run, when it needs asking
        (``choice.asks_server``); what it told (:meth:`told`)."""
        if not choice.asks_server:
            return None
        key = self._key(choice)
        task = self._asked.get(key)
        if task is None:
            task = self._asked[key] = asyncio.ensure_future(self._question(choice))
        return await asyncio.shield(task)  # a cancelled turn leaves the question to the others

    async def _question(self, choice: ModelChoice) -> ServerFacts | None:
        base = choice.server or ""
        key = choice.options.get("api_key")
        facts = await self._ask(base, served_name(choice, self._environ), key)
        if facts is None:
            return None
        own = choice.options
        used = ServerFacts(
            facts.kind,
            facts.url,
            None if own.get("context_window") is not None else facts.context_window,
            None if own.get("max_concurrency") is not None else facts.max_concurrency,
        )
        self._facts[self._key(choice)] = used
        if used.said():
            self._notice(
                f"fems: model {choice.model}: {used.said()}, as {facts.kind}'s server at "
                f"{facts.url} says (set them in its model-map entry to decide yourself)"
            )
        return used

    def told(self, choice: ModelChoice) -> ServerFacts | None:
        """What the server of ``choice`` said, as far as the entry leaves it to say (its
        window and slots None where the entry states its own); None when it was not asked or
        answered nothing. No server asked (a hosted model's run): None at once."""
        return self._facts.get(self._key(choice)) if self._facts else None
