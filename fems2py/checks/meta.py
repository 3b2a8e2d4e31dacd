"""The checks of ``meta:`` (§3): known keys, each given once, values of the right kind.

A script's ``meta:`` accepts :data:`META_KEYS`; a module's only :data:`MODULE_META_KEYS` (the
others have no effect there). An unknown key is a warning, a value that does not fit its key
an error: :data:`_VALUE_RULES` says, per key, what fits and what to write instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fems_runtime.words import SESSION_SPEC

from fems2py.checks.report import Report
from fems2py.diagnostics import suggest
from fems2py.nodes import (
    ListValue,
    MetaEntry,
    Module,
    NullValue,
    NumberValue,
    StringValue,
    Value,
)

#: §3: the keys of a script's ``meta:``, and the few a module's ``meta:`` accepts.
META_KEYS = (
    *("name", "version", "id", "owner", "database", "session", "system_safety"),
    *("output_style", "max_steps", "delay", "model", "max_concurrency"),
    *("timeout", "retry_budget", "max_tool_rounds", "max_tokens", "max_cost"),
)
MODULE_META_KEYS = ("max_steps", "delay")


def check_meta(entries: Iterable[MetaEntry], module: Module | None, report: Report) -> None:
    """§3: known keys (unknown ones are a warning), each once, numbers where numbers go."""
    allowed = MODULE_META_KEYS if module is not None else META_KEYS
    seen: dict[str, int] = {}
    for entry in entries:
        key, value = entry.key, entry.value
        if key in seen:
            report.error(
                f"meta key '{key}' is given twice", entry.span, f"first given at line {seen[key]}"
            )
            continue
        seen[key] = entry.span.line
        if key not in allowed:
            if module is not None and key in META_KEYS:
                message = f"meta key '{key}' has no effect in a module and is ignored"
                hint = "a module's meta: accepts max_steps and delay (§3)"
            else:
                message = f"unknown meta key '{key}' is ignored"
                hint = suggest(key, allowed) or "meta keys are: " + ", ".join(allowed)
            report.warning(message, entry.span, hint)
            continue
        rule = _VALUE_RULES.get(key)
        if rule is not None and not rule.fits(value):
            report.error(rule.message, value.span, rule.hint)


@dataclass(frozen=True)
class _Rule:
    """What a key's value must be: ``fits`` says whether it is, the message and hint what to
    write instead."""

    fits: Callable[[Value], bool]
    message: str
    hint: str


def _whole_number(minimum: int) -> Callable[[Value], bool]:
    def fits(value: Value) -> bool:
        return (
            isinstance(value, NumberValue)
            and isinstance(value.value, int)
            and value.value >= minimum
        )

    return fits


def _number(minimum: float, *, above: bool = False) -> Callable[[Value], bool]:
    def fits(value: Value) -> bool:
        if not isinstance(value, NumberValue):
            return False
        return value.value > minimum if above else value.value >= minimum

    return fits


def _session(value: Value) -> bool:
    return _whole_number(1)(value) or (
        isinstance(value, StringValue) and SESSION_SPEC.fullmatch(value.value) is not None
    )


def _model(value: Value) -> bool:
    """A model name is text (null or "": none, as if the key were left out)."""
    return isinstance(value, StringValue | NullValue)


def _owners(value: Value) -> bool:
    """One user id or a list of them: ids are text (numbers are read as text here, §3)."""
    ids = value.items if isinstance(value, ListValue) else (value,)
    return all(isinstance(item, StringValue | NullValue) for item in ids)


_VALUE_RULES = {
    "model": _Rule(
        _model,
        "meta 'model' must be a model name",
        "e.g. model = openai/gpt-4o-mini (a litellm model string or an alias of the model map, "
        "§15.2)",
    ),
    "owner": _Rule(
        _owners,
        "meta 'owner' must be a user id or a list of user ids",
        "e.g. owner = 001 or owner = [1, 2] (ids of the users table, §3)",
    ),
    "max_steps": _Rule(
        _whole_number(1), "meta 'max_steps' must be a whole number ≥ 1", "e.g. max_steps = 100"
    ),
    "max_concurrency": _Rule(
        _whole_number(1),
        "meta 'max_concurrency' must be a whole number ≥ 1",
        "e.g. max_concurrency = 8",
    ),
    "max_tool_rounds": _Rule(
        _whole_number(0),
        "meta 'max_tool_rounds' must be a whole number ≥ 0",
        "e.g. max_tool_rounds = 8 (model → tools → model rounds per reply, §15.5)",
    ),
    "max_tokens": _Rule(
        _whole_number(1),
        "meta 'max_tokens' must be a whole number ≥ 1",
        "e.g. max_tokens = 400 (the most tokens one reply may have, §3)",
    ),
    "max_cost": _Rule(
        _number(0),
        "meta 'max_cost' must be a number of US dollars ≥ 0",
        "e.g. max_cost = 0.50 (the run stops once its recorded cost passes it, §15.6)",
    ),
    "delay": _Rule(_number(0), "meta 'delay' must be a number of seconds ≥ 0", "e.g. delay = 0.5"),
    "timeout": _Rule(
        _number(0, above=True),
        "meta 'timeout' must be a number of seconds > 0",
        "e.g. timeout = 60",
    ),
    "retry_budget": _Rule(
        _number(0, above=True),
        "meta 'retry_budget' must be a number of seconds > 0",
        "e.g. retry_budget = 120",
    ),
    "session": _Rule(
        _session,
        "meta 'session' must be new, a session number, or 'N / new'",
        "session = new starts a new session; session = 3 / new continues 3 or creates it "
        "(sessions are numbered from 1)",
    ),
}
