"""Hostile replies (§10.3): every bad value is a rejected signal, never a crash, and finding
signals never freezes the run whatever the reply holds."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fems_runtime.signals import (
    LARGE_REPLY,
    OutSpec,
    aapply_signals,
    apply_signals,
    extract_signals,
)
from fems_runtime.values import MAX_DEPTH, MAX_INT_DIGITS, parse_literal, to_json
from fems_runtime.variables import ActorSpec, Variables


def fresh() -> Variables:
    return Variables({"note": "", "count": 0, "price": 1.5}, [ActorSpec("@Eve")])


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


BIG = "9" * MAX_INT_DIGITS  # the largest int a value may hold


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        (nested(300), f"nested deeper than {MAX_DEPTH} levels"),  # was a RecursionError
        ("{a: " * 150 + "1" + "}" * 150, f"nested deeper than {MAX_DEPTH} levels"),
        ("1" * (MAX_INT_DIGITS + 1), "more than 4,000 digits"),
        ("4" * 4301, "more than 4,000 digits"),  # was a ValueError from int()
        (f"[1, -{'2' * (MAX_INT_DIGITS + 1)}]", "more than 4,000 digits"),
        ("1e999", "too large to be a finite number"),
        ("{1e999: x}", "too large to be a finite number"),
        ('"bad \ud800 text"', "not valid Unicode"),  # was a UnicodeEncodeError
        ("bad \udfff", "not valid Unicode"),
        ("[\ufffd]", "not valid Unicode"),
    ],
)
def test_values_beyond_the_limits_are_rejected_signals(value: str, reason: str) -> None:
    variables = fresh()
    outcome = apply_signals(f"SET VARIABLE: <<note = {value}>> ok", variables.root, None)
    assert outcome.applied == []
    [rejected] = outcome.rejected
    assert reason in rejected.reason
    assert variables.root.get("note") == ""
    json.dumps(outcome.SET_VARIABLE, ensure_ascii=False).encode("utf-8")  # storable as is


def test_values_at_the_limits_are_accepted() -> None:
    variables = fresh()
    reply = (
        f"SET VARIABLE: <<note = {nested(MAX_DEPTH)}>> "
        f"SET VARIABLE: <<count = {BIG}>> SET VARIABLE: <<price = 1e308>>"
    )
    outcome = apply_signals(reply, variables.root, None)
    assert outcome.rejected == []
    assert variables.root.get("count") == int(BIG)
    value = variables.root.get("note")
    for _ in range(MAX_DEPTH):
        [value] = value
    assert value == 1


def test_malformed_text_is_bare_text_whatever_it_holds() -> None:
    """Only a well-formed literal can break a limit; anything else stays a string."""
    for text in (nested(300)[:-1], "[" * 300, "[1e999", f"[{'1' * 5000}"):
        assert parse_literal(text) == text


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (f"SET VARIABLE: <<count += {BIG}>> SET VARIABLE: <<count += {BIG}>>", "4,000 digits"),
        (f"SET VARIABLE: <<count -= {BIG}>> SET VARIABLE: <<count -= 9>>", "4,000 digits"),
        ("SET VARIABLE: <<price += 1e308>> SET VARIABLE: <<price += 1e308>>", "finite"),
        # a float plus an int too large for one overflowed (found by bench fuzz)
        (f"SET VARIABLE: <<count = 1>> SET VARIABLE: <<price -= {BIG}>>", "finite"),
    ],
)
def test_increments_past_the_limits_are_rejected(reply: str, reason: str) -> None:
    """The first increment fits; the second would cross the limit and is rejected, so the next
    prompt can still render the value (two 4,300-digit increments crashed it)."""
    variables = fresh()
    outcome = apply_signals(reply, variables.root, None)
    assert len(outcome.applied) == 1
    [rejected] = outcome.rejected
    assert reason in rejected.reason
    assert len(str(variables.root.get("count"))) <= MAX_INT_DIGITS + 1
    assert math.isfinite(variables.root.get("price"))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "Infinity", '"nan"', "1e999"])
def test_float_outs_take_finite_numbers_only(value: str) -> None:
    variables = fresh()
    outs = [OutSpec("price", type="float")]
    outcome = apply_signals(f"SET VARIABLE: <<price = {value}>>", variables.root, outs)
    assert outcome.applied == [] and len(outcome.rejected) == 1
    assert variables.root.get("price") == 1.5


def test_untyped_nan_stays_text() -> None:
    variables = fresh()
    apply_signals("SET VARIABLE: <<note = nan>>", variables.root, None)
    assert variables.root.get("note") == "nan"


def test_json_of_any_value_can_be_written() -> None:
    """Trace and result files take whatever a variable holds (an author's arithmetic can make
    an int too long for ``str()``; a function can return a lone surrogate)."""
    data = to_json({"big": 10 ** (MAX_INT_DIGITS + 500), "text": "a\ud800b", "\udc00": 1})
    text = json.dumps(data, ensure_ascii=False)
    text.encode("utf-8")
    assert data["text"] == "a\ufffdb" and "more than 4,000 digits" in data["big"]


def test_unclosed_quotes_from_the_issue_are_read_quickly() -> None:
    """4,000 signals whose quote never closes (115 KB): the old scanner ran past 120 s on this
    reply; each signal is now read up to the next prefix only, and all are rejected."""
    reply = "SET VARIABLE: <<note = “x " * 4000
    variables = fresh()
    outcome = apply_signals(reply, variables.root, None)
    assert len(outcome.rejected) == 4000 and outcome.applied == []
    assert variables.root.get("note") == ""


def test_every_prefix_starts_a_signal_even_inside_a_quoted_value() -> None:
    """The decision that keeps extraction linear: a body never reaches past the next prefix."""
    reply = 'SET VARIABLE: <<note = "say SET VARIABLE: <<count = 2>> now">>'
    found = extract_signals(reply)
    assert [signal.body for signal in found] == [None, "count = 2"]
    assert found[0].text == 'SET VARIABLE: <<note = "say'


def test_a_long_reply_is_read_off_the_event_loop() -> None:
    """Other branches keep running while a long reply's signals are read (§10.3)."""
    reply = "SET VARIABLE: <<note = “x " * (2 * LARGE_REPLY // 26) + "SET VARIABLE: <<count = 3>>"
    variables = fresh()
    ticks = 0

    async def other_branch(done: asyncio.Event) -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def main() -> None:
        done = asyncio.Event()
        ticker = asyncio.create_task(other_branch(done))
        await asyncio.sleep(0)
        before = ticks
        outcome = await aapply_signals(reply, variables.root, None)
        done.set()
        await ticker
        assert ticks > before + 1  # the loop ran while the reply was read
        assert [a.target for a in outcome.applied] == ["count"]

    asyncio.run(main())
    assert variables.root.get("count") == 3
