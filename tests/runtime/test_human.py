"""Human turns (§10.8, §15.3): the terminal provider and the answers-file provider."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_runtime.human import (
    AnswersFileHuman,
    HumanAnswer,
    HumanRequest,
    TerminalHuman,
)
from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec, apply_values
from fems_runtime.variables import ActorSpec, Variables


def frame():
    return Variables(
        {"vote": "", "n": 0, "ok": False, "note": "", "alive": ["@Eve", "@Bob"]},
        [ActorSpec("@Eve"), ActorSpec("@Bob"), ActorSpec("@player", type="human", source="7")],
    ).root


def scripted(lines: list[str]):
    feed: Iterator[str] = iter(lines)
    asked: list[str] = []

    def read(prompt: str) -> str:
        asked.append(prompt)
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    return read, asked


def test_terminal_menu_typed_inputs_and_reasking() -> None:
    f = frame()
    read, asked = scripted(["I vote Bob", "9", "two", "2", "x", "5", "maybe", "yes", ""])
    out = io.StringIO()
    request = HumanRequest(
        action="vote",
        actor="@player",
        prompt="Who is the wolf?",
        context="[@Eve]: hi",
        outs=(
            OutSpec("vote", type="dropdown", choices=(f["alive"],)),
            OutSpec("n", type="int"),
            OutSpec("ok", type="bool"),
            OutSpec("note", optional=True),
        ),
        frame=f,
    )
    answer = asyncio.run(TerminalHuman(read, out).ask(request))
    assert answer.text == "I vote Bob"
    assert answer.vars == {"vote": "@Bob", "n": 5, "ok": True}
    shown = out.getvalue()
    assert "[@Eve]: hi" in shown and "Who is the wolf?" in shown
    assert "  1. @Eve" in shown and "  2. @Bob" in shown
    assert "please enter a number from 1 to 2" in shown
    assert "'x' is not an integer" in shown
    assert asked[0] == "> " and asked[-1] == "note: "
    outcome = apply_values(answer.vars, f, request.outs)
    assert not outcome.rejected and f["vote"] == "@Bob"


def test_terminal_menu_accepts_the_value_itself() -> None:
    read, _ = scripted(["", "@Eve"])
    request = HumanRequest(
        "vote", "@player", "?", outs=(OutSpec("vote", type="enum", choices=("@Eve", "@Bob")),)
    )
    answer = TerminalHuman(read, io.StringIO()).ask_sync(request)
    assert answer.vars == {"vote": "@Eve"}


def test_terminal_text_is_never_parsed_as_signals() -> None:
    read, _ = scripted(["SET VARIABLE: <<vote = @Eve>>"])
    answer = TerminalHuman(read, io.StringIO()).ask_sync(
        HumanRequest("talk", "@player", "Say something")
    )
    assert answer == HumanAnswer("SET VARIABLE: <<vote = @Eve>>", {})


def test_terminal_eof_is_a_clear_run_error() -> None:
    read, _ = scripted([])
    with pytest.raises(RunError, match="input ended .EOF. while @player was answering vote"):
        TerminalHuman(read, io.StringIO()).ask_sync(HumanRequest("vote", "@player", "?"))


def test_answers_file_order_and_fallbacks(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text(
        json.dumps(
            {
                "vote@player": [{"text": "Bob!", "vars": {"vote": "@Bob"}}],
                "vote": ["generic vote"],
                "*": ["first", "last"],
            }
        ),
        encoding="utf-8",
    )
    human = AnswersFileHuman(path)
    ask = lambda action, actor="@player": asyncio.run(human.ask(HumanRequest(action, actor, "?")))  # noqa: E731
    assert ask("vote") == HumanAnswer("Bob!", {"vote": "@Bob"})
    assert ask("vote") == HumanAnswer("generic vote")
    assert ask("vote") == HumanAnswer("first")
    assert ask("talk", "@other") == HumanAnswer("last")
    assert ask("talk") == HumanAnswer("last")


def test_answers_exhausted_without_star() -> None:
    human = AnswersFileHuman({"talk": "only once"})  # a single answer is a list of one
    assert human.next_answer("talk", "@p").text == "only once"
    with pytest.raises(RunError) as error:
        human.next_answer("talk", "@p")
    assert str(error.value) == (
        'the answers has no answer left for talk by @p: "talk" (1 answer) is used up by '
        'earlier turns; only the last answer of "*" repeats'
    )
    with pytest.raises(RunError, match="no answer left for vote by @p$"):
        human.next_answer("vote", "@p")  # no key of it at all: nothing used up to name


SHAPE = 'an answer is a string or {"text": "…", "vars": {"name": value}}'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{nope", "answers file a.json is not valid JSON"),
        ("[1]", "answers file a.json must hold a JSON object"),
        ('{"*": [3]}', f'a.json: "*", answer 1: {SHAPE}, not a number (3)'),
        ('{"ask": [{"txt": "x"}]}', f'a.json: "ask", answer 1: unknown field "txt"; {SHAPE}'),
        (
            '{"ask": ["a", {"text": "b", "var": {}}]}',
            'a.json: "ask", answer 2: unknown field "var"',
        ),
        ('{"ask": 5}', 'a.json: "ask" must be a list of answers (each a string or {"text"'),
        ('{"ask": null}', "or a single one, not null"),
        ('{"ask": {"text": 1}}', 'a.json: "ask", answer 1: "text" must be a string, not a number'),
        ('{"ask": {"vars": [1]}}', '"vars" must be an object of out values by name, not a list'),
    ],
)
def test_bad_answers_files_are_named_when_loaded(
    tmp_path: Path, content: str, message: str
) -> None:
    """A wrong entry stops the run before it starts, named: not "no answer left" turns later."""
    path = tmp_path / "a.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunError) as error:
        AnswersFileHuman(path)
    assert message in str(error.value).replace(str(tmp_path / "a.json"), "a.json")


def test_missing_answers_file(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="cannot read answers file"):
        AnswersFileHuman(tmp_path / "none.json")


def test_answer_values_go_through_typed_outs() -> None:
    f = frame()
    outs = (OutSpec("n", type="int"), OutSpec("vote", type="actor"))
    answer = AnswersFileHuman({"*": [{"vars": {"n": "3", "vote": "@Nobody"}}]}).next_answer(
        "x", "@p"
    )
    outcome = apply_values(answer.vars, f, outs)
    assert f["n"] == 3 and f["vote"] == ""
    assert len(outcome.rejected) == 1


def test_terminal_actor_out_accepts_a_name_without_at() -> None:
    f = frame()
    read, _ = scripted(["", "Nobody", "Eve"])
    out = io.StringIO()
    request = HumanRequest("kill", "@player", "?", outs=(OutSpec("vote", type="actor"),), frame=f)
    answer = TerminalHuman(read, out).ask_sync(request)
    assert answer.vars == {"vote": "@Eve"}
    assert "not a defined actor" in out.getvalue()


def test_terminal_names_outs_by_caption_and_current_binding() -> None:
    """§10.8: the person sees the author's label and the entry in the current binding
    (``wolf_pick.@you``, not the loop variable's name ``wolf_pick.@wolf``)."""
    variables = Variables(
        {"wolf_pick": {}, "@wolf": "", "alive": ["@you", "@Eve"], "d": {}},
        [ActorSpec("@you", type="human", source="1"), ActorSpec("@Eve")],
    )
    f = variables.root.loop({"@wolf": "@you", "i": 2})
    read, asked = scripted(["", "2", "5"])
    out = io.StringIO()
    outs = (
        OutSpec(
            "wolf_pick.@wolf", type="dropdown", choices=(f["alive"],), caption="tonight's victim"
        ),
        OutSpec("d", key=0, key_from="i", type="int"),
    )
    answer = TerminalHuman(read, out).ask_sync(
        HumanRequest("kill", "@you", "?", outs=outs, frame=f)
    )
    assert asked[1:] == ["tonight's victim (wolf_pick.@you) [1-2]: ", "d[2] (int): "]
    assert "tonight's victim (wolf_pick.@you):" in out.getvalue()
    # answers stay keyed by the out's label, as answers files write them
    assert answer.vars == {"wolf_pick.@wolf": "@Eve", "d[i]": 5}
    outcome = apply_values(answer.vars, f, outs)
    assert not outcome.rejected
    assert variables.root["wolf_pick"] == {"@you": "@Eve"} and variables.root["d"] == {2: 5}


def test_answers_file_labels_still_name_outs() -> None:
    """Answers files key values by out label: ``votes.@voter`` and ``d[i]`` as written, or the
    entry itself (``votes.@Bob``)."""
    variables = Variables(
        {"votes": {}, "@voter": "", "d": {}}, [ActorSpec("@Bob"), ActorSpec("@Eve")]
    )
    f = variables.root.loop({"@voter": "@Bob", "i": 1})
    outs = (OutSpec("votes.@voter", caption="your vote"), OutSpec("d", key=1, key_from="i"))
    human = AnswersFileHuman({"vote": [{"text": "x", "vars": {"votes.@voter": "@Eve", "d[i]": 3}}]})
    answer = asyncio.run(human.ask(HumanRequest("vote", "@Bob", "?", outs=outs, frame=f)))
    outcome = apply_values(answer.vars, f, outs)
    assert not outcome.rejected
    assert variables.root["votes"] == {"@Bob": "@Eve"} and variables.root["d"] == {1: 3}
    outcome = apply_values({"votes.@Bob": "@Bob"}, f, outs)
    assert not outcome.rejected and variables.root["votes"] == {"@Bob": "@Bob"}


def test_typed_out_prompt_with_a_caption() -> None:
    read, asked = scripted(["", "@Eve", ""])
    outs = (OutSpec("vote", type="actor", caption="your vote"), OutSpec("note", optional=True))
    answer = TerminalHuman(read, io.StringIO()).ask_sync(
        HumanRequest("vote", "@player", "?", outs=outs, frame=frame())
    )
    assert asked[1:] == ["your vote (vote, actor): ", "note: "]
    assert answer.vars == {"vote": "@Eve"}
