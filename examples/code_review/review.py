"""Checks for the code review example: a developer may not call a change finished while a
test still fails."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TOTAL_TESTS = 5


def check_test_report(
    finish: bool,
    tests_passed: Mapping[str, Any],
    me: str,
    SET_VARIABLE: Sequence[str] | None = None,  # noqa: N803 (the name FEM passes, §10.5)
) -> list[tuple[bool, bool, str]]:
    """`resolve` hook of run_tests: one (is_success, show_to_ai, feedback) per out."""
    passed = tests_passed.get(me)
    count_ok = isinstance(passed, int) and 0 <= passed <= TOTAL_TESTS
    count = (True, False, "") if count_ok else (False, True, f"report 0 to {TOTAL_TESTS} tests")
    if finish is True and passed != TOTAL_TESTS:
        done = (False, True, f"only {passed} of {TOTAL_TESTS} tests pass: you are not finished")
    else:
        done = (True, False, "")
    if SET_VARIABLE:
        unread = "; ".join(SET_VARIABLE)
        return [count, (False, True, f"unreadable signals: {unread}")]
    return [count, done]
