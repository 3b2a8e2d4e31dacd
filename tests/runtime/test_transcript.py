"""The run transcript: who spoke in which room, narration set apart, prompts never shown."""

import io

import pytest
from fems_runtime.transcript import Transcript


@pytest.fixture
def printed() -> tuple[Transcript, io.StringIO]:
    stream = io.StringIO()
    return Transcript(everyone={"@A", "@B", "@C"}, stream=stream), stream


def test_a_reply_names_speaker_and_room(printed):
    transcript, stream = printed
    transcript.message("reply", "@A", ["@A", "@B"], "We strike at dawn.\nSET VARIABLE: <<x = 1>>")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "@A ▸ @A, @B"
    assert lines[1:] == ["    We strike at dawn.", "    SET VARIABLE: <<x = 1>>"]


def test_a_room_holding_everyone_is_called_all(printed):
    transcript, stream = printed
    transcript.message("narration", "narrator", ["@A", "@B", "@C"], "Night falls.")
    assert stream.getvalue().strip() == "~ Night falls.  [all]"


def test_a_room_missing_one_or_two_actors_names_them(printed):
    transcript, stream = printed
    transcript.message("reply", "@A", ["@A", "@B"], "hi")
    assert stream.getvalue().splitlines()[0] == "@A ▸ @A, @B"
    big_stream = io.StringIO()
    big = Transcript(everyone={"@A", "@B", "@C", "@D", "@E"}, stream=big_stream)
    big.message("reply", "@A", ["@A", "@B", "@C", "@D"], "hi")
    assert big_stream.getvalue().splitlines()[0] == "@A ▸ all but @E"


def test_prompts_are_private_and_never_printed(printed):
    transcript, stream = printed
    transcript.message("prompt", "@A", ["@A"], "secret instructions")
    assert stream.getvalue() == ""


def test_feedback_is_marked_private(printed):
    transcript, stream = printed
    transcript.message("feedback", "@B", ["@B"], "pick someone alive")
    assert "(feedback to @B, private) pick someone alive" in stream.getvalue()


def test_summary_shows_status_counts_and_chosen_variables(printed):
    transcript, stream = printed
    transcript.summary("completed", steps=43, model_calls=20, shown={"winner": "village"})
    text = stream.getvalue()
    assert "completed · 43 steps · 20 model calls" in text
    assert "winner = village" in text


def test_lenient_problems_are_flagged(printed):
    transcript, stream = printed
    transcript.problem("vote", "@A", "rejected signal 'x'")
    assert stream.getvalue() == "  ! vote by @A: rejected signal 'x'\n"
