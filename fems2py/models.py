"""`fems2py models`: the model map of a script's folder as a run would use it, and, with
``check``, one short call to each model the script uses, before a game is started (§15.2).

The script is read (not built) for the models it names: actors' and blueprints' `source:`,
actions' `model:`, `meta.model`, in the script and its modules; the run's `--model` (or
`FEMS_MODEL`) counts too. The rows and the calls are the runtime's
(:mod:`fems_runtime.modelcheck`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from fems_runtime.llm import ModelClient
from fems_runtime.modelcheck import CheckResult, ModelRow, check_model, describe, learn_servers
from fems_runtime.project import ProjectConfig
from fems_runtime.records import RunError

from fems2py.nodes import Action, Module, Script
from fems2py.pycode import plain_value


def used_names(script: Script, run_model: str | None = None) -> list[str]:
    """The models the script names, in order of first mention, the run's own first."""
    meta = {entry.key: plain_value(entry.value) for entry in script.meta}
    named = [run_model or os.environ.get("FEMS_MODEL"), meta.get("model")]
    named += [actor.source for actor in script.actors if actor.kind == "ai"]
    named += [blueprint.source for blueprint in script.blueprints]
    named += [action.model for action in _actions(script.actions, script.modules)]
    found: list[str] = []
    for name in named:
        if isinstance(name, str) and name.strip() and name.strip() not in found:
            found.append(name.strip())
    return found


def _actions(actions: Sequence[Action], modules: Sequence[Module]) -> Iterator[Action]:
    yield from actions
    for module in modules:
        yield from _actions(module.actions, module.modules)


def report_models(
    script: Script, folder: Path, out: IO[str], *, check: bool, run_model: str | None = None
) -> bool:
    """Print the project's models (and check the used ones); False when something needs
    fixing: a broken model-map entry or a check that failed."""
    meta = {entry.key: plain_value(entry.value) for entry in script.meta}
    client = ModelClient.for_project(ProjectConfig.of_folders((folder, Path.cwd())))
    used = used_names(script, run_model)
    names = [*client.model_map, *(name for name in used if name not in client.model_map)]
    if not names:
        print("no model map and no model named: a run plays fems/mock", file=out)
        return True
    results = asyncio.run(_ask(client, names, used if check else []))
    fine = True
    for name in names:
        try:
            row = describe(client, name, meta, used=name in used)
        except RunError as error:
            print(f"{name}: error: {error.message}", file=out)
            fine = False
            continue
        _print_row(row, out)
        if name in results:
            fine = _print_check(results[name], out) and fine
    if not used:
        print("the script names no model: a run takes --model or FEMS_MODEL", file=out)
        if check:  # said, so that a check of nothing is not taken for a check that passed
            print(
                "--check checked nothing: add --model NAME to check the model you will play",
                file=out,
            )
    return fine


async def _ask(client: ModelClient, names: list[str], checked: list[str]) -> dict[str, CheckResult]:
    """Ask the local servers what they are, then make the checks one at a time (a local
    server answering one request at a time would otherwise time them wrong)."""
    try:
        await learn_servers(client, names)
        return {name: await check_model(client, name) for name in checked}
    finally:
        await client.aclose()


def _print_row(row: ModelRow, out: IO[str]) -> None:
    used = "  (used by the script)" if row.used else ""
    print(f"{row.name} → {row.model}{used}", file=out)
    for label, value in (
        ("path", row.path),
        ("window", row.window),
        ("reply cap", row.cap),
        ("price", row.price),
        ("concurrency", row.concurrency),
    ):
        print(f"    {label:<12} {value}", file=out)


def _print_check(result: CheckResult, out: IO[str]) -> bool:
    if result.failure is not None:
        print(f"    {'check':<12} FAILED: {result.failure}", file=out)
        return False
    rate = (
        f"{result.tokens_per_second:.1f} tokens/s" if result.tokens_per_second else "rate unknown"
    )
    print(f"    {'check':<12} first chunk after {result.first_chunk:.2f} s, {rate}", file=out)
    return True
