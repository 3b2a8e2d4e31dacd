"""``max_tokens`` (§3, §9.2): the meta key is every ai/mind turn's default cap, the action field
overrides it, and the value reaches the :class:`~fems_runtime.specs.TurnSpec` the turn runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from fems_helpers import build_script, load
from fems_runtime import flow
from fems_runtime.specs import TurnSpec

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
    """Run the script offline; the ``max_tokens`` of each turn's spec, by action."""
    seen: dict[str, int | None] = {}

    def recording(*args: object, **fields: object) -> TurnSpec:
        spec = TurnSpec(*args, **fields)  # type: ignore[arg-type]
        seen[spec.action] = spec.max_tokens
        return spec

    monkeypatch.setattr(flow, "TurnSpec", recording)
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


def test_the_module_says_the_cap_where_the_turn_is(tmp_path: Path) -> None:
    source = build_script(tmp_path, SCRIPT.format(meta="max_tokens: 160")).read_text()
    assert source.count("max_tokens=160") == 1 and source.count("max_tokens=40") == 1
