"""Which sessions a batch holds, and the batch's identity.

A batch runs seeds ``first … first+runs-1`` (``--seeds A..B``, else ``1..N``) with every
``--model`` given: the sessions of one seed under each model are paired, so models are
compared on the same games. Run ``index`` is ``seed position × models + model position``, so a
batch extended with ``--runs`` keeps every index it had.

The batch id is ``--batch NAME``, else derived from what decides a session's outcome: the
built module, the first seed, the models, the ``--set`` values, who plays humans, the
replies and the ``--fork`` branch point. The number of runs is not part of it: rerunning
with a larger ``--runs`` adds sessions to the same batch.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fems2py.batch import UsageError
from fems2py.batch.worker import Job

BATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Plan:
    """The sessions of a batch: seeds ``first`` … ``first + runs - 1`` under each model."""

    first_seed: int
    runs: int
    models: tuple[str | None, ...]

    def jobs(self) -> list[Job]:
        return [
            Job(index=position * len(self.models) + m, seed=self.first_seed + position, model=model)
            for position in range(self.runs)
            for m, model in enumerate(self.models)
        ]


def make_plan(runs: int | None, seeds: str | None, models: Sequence[str]) -> Plan:
    """The plan of ``--runs N`` and/or ``--seeds A..B`` (both: they must agree)."""
    first, count = 1, runs
    if seeds is not None:
        match = re.fullmatch(r"\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*", seeds)
        if match is None:
            raise UsageError(f"--seeds {seeds}: expected A..B", "for example --seeds 1..100")
        first, last = int(match[1]), int(match[2])
        if last < first:
            raise UsageError(f"--seeds {seeds}: the last seed is smaller than the first")
        if runs is not None and runs != last - first + 1:
            raise UsageError(
                f"--runs {runs} and --seeds {seeds} ({last - first + 1} seeds) disagree",
                "give one of them",
            )
        count = last - first + 1
    if count is None:
        raise UsageError("how many sessions? give --runs N or --seeds A..B")
    if count < 1:
        raise UsageError(f"--runs {count}: give at least one run")
    return Plan(first, count, tuple(dict.fromkeys(models)) or (None,))


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    """``--set NAME=VALUE`` options as written (values are read against the script later)."""
    sets: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name.strip():
            raise UsageError(f"--set {item}: expected NAME=VALUE", "for example --set max_days=3")
        sets[name.strip()] = value.strip()
    return sets


def batch_id(
    name: str | None,
    script: str,
    module_source: str,
    plan: Plan,
    sets: Mapping[str, str],
    human: str,
    replies: Any,
    fork: Any = None,
) -> str:
    """``--batch NAME`` (checked), else ``SCRIPT-HASH`` of what decides the sessions (with
    ``fork``, the branch point they all start from)."""
    if name is not None:
        if not BATCH_NAME.fullmatch(name):
            raise UsageError(
                f"--batch {name!r}: use letters, digits, '.', '_' and '-' (at most 100)",
            )
        return name
    identity = json.dumps(
        {
            "module": hashlib.sha256(module_source.encode("utf-8")).hexdigest(),
            "first_seed": plan.first_seed,
            "models": plan.models,
            "set": dict(sorted(sets.items())),
            "human": human,
            "replies": replies,
            **({"fork": [fork.parent, fork.turn]} if fork is not None else {}),
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", script.rsplit(".", 1)[0])[:60] or "batch"
    return f"{stem}-{hashlib.sha256(identity.encode('utf-8')).hexdigest()[:12]}"
