"""Loose signals end to end (§10.1, §10.3): the two replies of issue 22 that models commonly
write, through a built script, its ``dropdown`` of actors and the trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from fems_helpers import run_script

BALLOT = """
    vars:
        alive = [@Alice, @Bob]
        @ballot = ""
    actors:
        ai @Alice
        ai @Bob
    action vote @ai(@Alice):
        prompt: Vote among {alive}.
        out: @ballot: dropdown, choices={alive}
    mainflow:
        [START] -> vote -> [END]
"""


@pytest.mark.parametrize(
    "reply",
    [
        "**SET VARIABLE:** <<@ballot = @Bob>>",
        "I vote for Bob. SET VARIABLE: <<@ballot = Bob>>",
        "`SET VARIABLE:` <<@ballot = bob>>",
        "My ballot:\n```\n__SET VARIABLE__: <<@ballot = Bob>>\n```",
    ],
)
def test_a_loosely_written_ballot_is_read(tmp_path: Path, reply: str) -> None:
    result, events = run_script(tmp_path, BALLOT, model="fems/script", replies={"vote": [reply]})
    assert result.variables["@ballot"] == "@Bob"
    assert [e for e in events if e["event"] == "rejected"] == []


def test_a_bare_name_that_is_no_choice_is_still_rejected(tmp_path: Path) -> None:
    reply = "SET VARIABLE: <<@ballot = Carol>>"
    result, events = run_script(tmp_path, BALLOT, model="fems/script", replies={"vote": [reply]})
    assert result.variables["@ballot"] == ""
    [problem] = [p for e in events if e["event"] == "rejected" for p in e["problems"]]
    assert "'Carol' is not one of the choices [@Alice, @Bob]" in problem
