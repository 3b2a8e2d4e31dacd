"""A model's private reasoning cut out of its reply (§13.1): a whole text, and the same text
arriving in pieces cut anywhere (a tag split across chunks included)."""

from __future__ import annotations

import pytest
from fems_runtime.replies import ReasoningSplitter, join_reasoning, split_reasoning

CASES = [
    # (reply as the model wrote it, reasoning, reply that remains)
    (
        "<think>I am the wolf.</think>\n\nHello! <<@kill = @bob>>",
        "I am the wolf.",
        "Hello! <<@kill = @bob>>",
    ),
    ("  \n<thinking>plan</thinking> I vote Bob.", "plan", "I vote Bob."),
    ("<think>cut by max_tokens, never closed", "cut by max_tokens, never closed", ""),
    ("<THINK>loud</Think>quiet", "loud", "quiet"),
    (
        "\n<think>我是狼，今晚杀鲍勃。</think>大家好，我是村民。",
        "我是狼，今晚杀鲍勃。",
        "大家好，我是村民。",
    ),
    ("<think></think>just the reply", "", "just the reply"),
    ("<think>a</think>", "a", ""),
    ("<think>a</thi", "a</thi", ""),  # unclosed: everything after the opening is reasoning
    ("<thinking>not </think> the end</thinking>reply", "not </think> the end", "reply"),
    # not at the start: part of the reply
    ("Hello <think>aloud</think> there", "", "Hello <think>aloud</think> there"),
    ("I <think> so", "", "I <think> so"),
    # starts like a tag, is not one
    ("<thi", "", "<thi"),
    ("<thinker> says hi", "", "<thinker> says hi"),
    ("<<@ballot = @Bob>>", "", "<<@ballot = @Bob>>"),
    ("   plain reply", "", "   plain reply"),
    ("", "", ""),
]


@pytest.mark.parametrize(("text", "reasoning", "reply"), CASES)
def test_a_whole_reply(text: str, reasoning: str, reply: str) -> None:
    assert split_reasoning(text) == (reasoning, reply)


def _streamed(pieces: list[str]) -> tuple[str, str]:
    splitter = ReasoningSplitter()
    parts = [part for piece in pieces for part in splitter.feed(piece)] + splitter.finish()
    assert all(text for _, text in parts)  # nothing empty is ever told
    thought = "".join(text for kind, text in parts if kind == "reasoning")
    return thought.strip(), "".join(text for kind, text in parts if kind == "text")


@pytest.mark.parametrize(("text", "reasoning", "reply"), CASES)
def test_the_same_reply_in_pieces_cut_anywhere(text: str, reasoning: str, reply: str) -> None:
    for first in range(len(text) + 1):
        for second in range(first, len(text) + 1):
            pieces = [text[:first], text[first:second], text[second:]]
            assert _streamed(pieces) == (reasoning, reply), pieces


def test_a_tag_split_across_chunks_and_a_character_at_a_time() -> None:
    pieces = ["<thi", "nk>I am the wolf", "</th", "ink>", "\n\nGood morning."]
    assert _streamed(pieces) == ("I am the wolf", "Good morning.")
    text = "<thinking>秘密</thinking>你好"
    assert _streamed(list(text)) == ("秘密", "你好")


def test_reply_text_is_told_as_soon_as_it_is_decided() -> None:
    """Past the start, each piece of the reply is passed on at once, not held to the end."""
    splitter = ReasoningSplitter()
    assert splitter.feed("  ") == []  # may still open a block
    assert splitter.feed("Hel") == [("text", "  Hel")]
    assert splitter.feed("lo") == [("text", "lo")]
    inside = ReasoningSplitter()
    assert inside.feed("<think>plan") == [("reasoning", "plan")]
    assert inside.feed(" more</") == [("reasoning", " more")]  # "</" may start the closing tag
    assert inside.feed("think> Hi") == [("text", "Hi")]


def test_reasoning_from_several_sources_is_joined() -> None:
    assert join_reasoning("from the field ", "", "\nfrom the block") == (
        "from the field\n\nfrom the block"
    )
    assert join_reasoning("", " ") == ""
