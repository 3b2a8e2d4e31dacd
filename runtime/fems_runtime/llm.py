"""Every model call goes through `ModelClient`: model choice, lazy litellm, retries, pacing (§15).

litellm is imported only inside the first call to a real model, so importing a generated module
(or running it with the offline models of §15.3) never pays for it.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import sys
import tomllib
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from fems_runtime.offline import OFFLINE_MODELS, MockModel, OfflineTurn, ScriptModel
from fems_runtime.records import RunError

DEFAULT_MODEL = "fems/mock"
TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
_litellm_module: ModuleType | None = None


@dataclass(frozen=True)
class ModelChoice:
    """A resolved model: the litellm model string, its call options and the rung that chose it."""

    model: str
    options: Mapping[str, Any] = field(default_factory=dict)
    rung: str = "default"

    @property
    def offline(self) -> bool:
        """True for the built-in models that never touch the network."""
        return self.model in OFFLINE_MODELS


@dataclass(frozen=True)
class CallResult:
    """One completed call: the reply text and the usage figures stored with the message."""

    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None
    attempts: int = 1


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for transient errors (§15.4)."""

    attempts: int = 5
    base: float = 1.0
    cap: float = 30.0

    def pause(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait after the `failures`-th consecutive transient failure."""
        return rng.uniform(0, min(self.cap, self.base * 2 ** (failures - 1)))


def load_dotenv(path: str | Path, environ: MutableMapping[str, str] | None = None) -> None:
    """Read `KEY=VALUE` lines from a `.env` file without overriding variables already set."""
    environ = os.environ if environ is None else environ
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return
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


def load_model_map(path: str | Path) -> dict[str, str | dict[str, Any]]:
    """The `[models]` table of a `fems.toml` (empty when the file or the table is absent)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise RunError(f"{path}: invalid TOML: {exc}") from None
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise RunError(f"{path}: [models] must be a table")
    return models


def _env_alias_key(alias: str) -> str:
    return "FEMS_MODEL_" + re.sub(r"\W", "_", alias, flags=re.ASCII).upper()


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
        import litellm

        litellm.suppress_debug_info = True
        _litellm_module = litellm
    return _litellm_module


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


_MISSING_CREDENTIALS = re.compile(r"missing credentials|api_key client option must be set", re.I)


def _is_missing_key(exc: BaseException) -> bool:
    """litellm reports a missing provider key as a server error; retrying it is in vain."""
    return bool(_MISSING_CREDENTIALS.search(str(exc)))


def _is_transient(exc: BaseException) -> bool:
    if _is_missing_key(exc):
        return False
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    status = _status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"Timeout", "APIConnectionError", "RateLimitError", "APITimeoutError"})


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
        timeout: float = 120.0,
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
        self._pacing: dict[str, tuple[asyncio.Lock, list[float]]] = {}
        self._rng = random.Random(seed)

    @classmethod
    def for_project(
        cls, *base_dirs: str | Path, load_env: bool = True, **options: Any
    ) -> ModelClient:
        """A client configured from `fems.toml` and `.env` in `base_dirs` (default: the working
        directory) (§15.2); on a conflict the later directory wins."""
        dirs = [Path(d) for d in base_dirs] or [Path(".")]
        if load_env:
            for base in reversed(dirs):  # a .env never overrides: the later directory goes first
                load_dotenv(base / ".env")
        model_map: dict[str, str | dict[str, Any]] = {}
        for base in dirs:
            model_map.update(load_model_map(base / "fems.toml"))
        return cls(model_map=model_map, **options)

    def resolve(self, action_model: str | None = None, source: str | None = None) -> ModelChoice:
        """Apply the ladder: action `model:` > actor `source:` > meta.model > --model/FEMS_MODEL
        > offline `fems/mock`. The chosen name is looked up in the model map, then in
        `FEMS_MODEL_<ALIAS>`, and otherwise used as a litellm model string.

        **Decision:** an offline model chosen for the run (`--model fems/mock`, `--model
        fems/script`, `--replies`, or `FEMS_MODEL`) replaces every model of the script, so any
        script, whatever its actors' sources, can be tried and tested without a network.
        """
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
            self._notice(
                f"fems: no model configured; using the offline model {DEFAULT_MODEL} "
                "(set --model, FEMS_MODEL, meta model or an actor source)"
            )
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
        return ModelChoice(model, options, rung)

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, str]],
        turn: OfflineTurn,
        delay: float = 0.0,
    ) -> CallResult:
        """One model call: offline models answer directly, real ones go through litellm.
        ``delay`` is a module's meta.delay; the larger of it and the script's applies."""
        if choice.model == "fems/mock":
            return CallResult(self.mock.reply(turn, messages), choice.model)
        if choice.model == "fems/script":
            if self.script is None:
                raise RunError("model fems/script needs a replies file (--replies FILE)")
            return CallResult(self.script.reply(turn), choice.model)
        return await self._complete_remote(choice, messages, delay)

    async def _complete_remote(
        self, choice: ModelChoice, messages: list[dict[str, str]], delay: float = 0.0
    ) -> CallResult:
        failures = 0
        while True:
            try:
                async with self._slots:
                    await self._pace(choice.model, max(self.delay, delay))
                    response = await self._acompletion(choice, messages)
                return self._result(choice, response, failures + 1)
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                failures += 1
                if _is_missing_key(exc):
                    raise RunError(
                        f"model {choice.model} has no API key: {_describe(exc)} (a .env file "
                        "next to the script or in the working directory is read too)"
                    ) from None
                if not _is_transient(exc):
                    raise RunError(f"model {choice.model}: {_describe(exc)}") from None
                if failures >= self.retry.attempts:
                    raise RunError(
                        f"model {choice.model}: failed after {failures} attempts: {_describe(exc)}"
                    ) from None
                await asyncio.sleep(self.retry.pause(failures, self._rng))

    async def _pace(self, model: str, delay: float) -> None:
        """Hold the start of a call until `delay` seconds after the previous start of a call to
        the same model (meta.delay, §3)."""
        if delay <= 0:
            return
        lock, last = self._pacing.setdefault(model, (asyncio.Lock(), [float("-inf")]))
        loop = asyncio.get_running_loop()
        async with lock:
            wait = last[0] + delay - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            last[0] = loop.time()

    async def _acompletion(self, choice: ModelChoice, messages: list[dict[str, str]]) -> Any:
        litellm = import_litellm()
        options = {"timeout": self.timeout, "max_retries": 0, **choice.options}
        async with asyncio.timeout(self.timeout):
            return await litellm.acompletion(model=choice.model, messages=messages, **options)

    def _result(self, choice: ModelChoice, response: Any, attempts: int) -> CallResult:
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        cost: float | None
        try:
            cost = float(import_litellm().completion_cost(completion_response=response))
        except Exception:
            cost = None  # a model missing from litellm's price table has no known cost
        return CallResult(
            text=text,
            model=choice.model,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            cost=cost,
            attempts=attempts,
        )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"
