"""``max_tokens`` (§3, §9.2): the meta key is every ai/mind turn's default cap, the action field
overrides it, and the value reaches the model call of the turn (the generated module says the
meta value once, in ``SCRIPT.meta``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, load
from fems_runtime.llm import CallResult, ModelClient

SCRIPT = """
    meta:
        {meta}
    actors:
        ai @a
        human @h
    action talk @ai(@a):
        prompt: Talk.
    action short @mind(@a):
        prompt: Short.
        max_tokens: 40
    action ask @human(@h):
        prompt: Ask.
    mainflow:
        [START] -> talk -> short -> ask -> [END]
"""


def caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta: str) -> dict[str, int | None]:
    """Run the script offline; the ``max_tokens`` each model call was given, by action (a
    person's turn makes none: no cap)."""
    seen: dict[str, int | None] = {"ask": None}
    complete = ModelClient.complete

    async def recording(client: ModelClient, *args: Any, **options: Any) -> CallResult:
        seen[args[2].action] = options.get("max_tokens")
        return await complete(client, *args, **options)

    monkeypatch.setattr(ModelClient, "complete", recording)
    module = load(build_script(tmp_path, SCRIPT.format(meta=meta)))
    module.run(db=":memory:", model="fems/mock", human="fems/mock")
    return seen


def test_meta_is_the_default_and_the_action_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert caps(tmp_path, monkeypatch, "max_tokens = 160") == {
        "talk": 160,
        "short": 40,
        "ask": None,  # a person's turn has no cap
    }


def test_without_meta_only_the_action_has_a_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert caps(tmp_path, monkeypatch, "name = t") == {"talk": None, "short": 40, "ask": None}


def test_the_module_says_each_cap_once(tmp_path: Path) -> None:
    source = build_script(tmp_path, SCRIPT.format(meta="max_tokens: 160")).read_text()
    assert source.count('"max_tokens": 160') == 1  # in SCRIPT.meta
    assert source.count("max_tokens=40") == 1 and "max_tokens=160" not in source
