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


def test_a_streamed_reply_prints_each_line_as_it_completes(printed):
    transcript, stream = printed
    live = transcript.live("@A", ["@A", "@B"])
    live.feed("reasoning", "they suspect me")
    live.feed("text", "We strike")
    assert "strike" not in stream.getvalue()  # the line is not complete yet
    live.feed("text", " at dawn.\nSET VAR")
    assert stream.getvalue().splitlines() == [
        "  … @A is reasoning",
        "@A ▸ @A, @B",
        "    We strike at dawn.",
    ]
    other = transcript.live("@B", ["@A", "@B"])
    other.feed("text", "Why?\n")
    live.feed("text", "IABLE: <<x = 1>>")
    live.finish("We strike at dawn.\nSET VARIABLE: <<x = 1>>")
    assert stream.getvalue().splitlines()[3:] == [
        "@B ▸ @A, @B",
        "    Why?",
        "@A ▸ @A, @B",  # another reply came in between: the header again
        "    SET VARIABLE: <<x = 1>>",
    ]
    assert "suspect" not in stream.getvalue()


def test_an_interrupted_stream_ends_with_the_marker(printed):
    transcript, stream = printed
    live = transcript.live("@A", ["@A"])
    live.feed("text", "I was asleep")
    live.finish("I was asleep [Interrupted]")
    assert stream.getvalue().splitlines()[1:] == ["    I was asleep [Interrupted]"]
