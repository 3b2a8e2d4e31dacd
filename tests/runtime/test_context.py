"""Context (§13, §8): default-deny built-in context, method calls off the loop, model messages."""

from __future__ import annotations

import asyncio
import threading

import pytest
from fems_runtime.context import (
    MEMORY_HEADER,
    ContextCache,
    ContextView,
    Request,
    builtin_context,
    call_method,
    format_context,
    method_kwargs,
    method_outputs,
    method_text,
    retry_messages,
)
from fems_runtime.records import RunError
from fems_runtime.store import Message, NewMessage, Store
from fems_runtime.variables import ActorSpec, Variables
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def shared_store():
    with Store(":memory:") as store:
        yield store


SOULS = [f"s{i}" for i in range(6)]
USERS = ["u1", "u2", "u3"]
message_strategy = st.tuples(
    st.sampled_from(["reply", "narration", "human", "feedback", "prompt"]),
    st.frozensets(st.sampled_from(SOULS), max_size=4),
    st.frozensets(st.sampled_from(USERS), max_size=2),
    st.text(max_size=12),
)
actor_strategy = st.tuples(st.sampled_from(SOULS), st.sampled_from([None, *USERS]))


@settings(max_examples=60, deadline=None)
@given(
    actors=st.lists(actor_strategy, min_size=1, max_size=6),
    messages=st.lists(message_strategy, max_size=25),
)
def test_builtin_context_holds_exactly_the_messages_in_scope(
    shared_store, actors, messages
) -> None:
    store = shared_store
    session = store.open_session()
    for i, (kind, souls, users, text) in enumerate(messages):
        store.add_message(
            session,
            kind,
            text,
            souls=souls,
            users=users,
            speaker_soul=min(souls, default=None),
            speaker_name=f"@a{i}",
        )
    for soul, user in actors:
        expected = [
            (f"@a{i}", kind, text)
            for i, (kind, souls, users, text) in enumerate(messages)
            if (soul in souls or (user is not None and user in users))
            and kind not in ("prompt", "feedback")
        ]
        seen = store.visible_messages(session, soul=soul, user=user)
        assert [(m.speaker_name, m.kind, m.content) for m in seen] == expected
        assert builtin_context(store, session, soul=soul, user=user) == format_context(seen)


@settings(max_examples=40, deadline=None)
@given(
    actors=st.lists(actor_strategy, min_size=1, max_size=4),
    rounds=st.lists(st.lists(message_strategy, max_size=5), min_size=1, max_size=5),
)
def test_kept_contexts_equal_a_fresh_read_turn_after_turn(tmp_path_factory, actors, rounds) -> None:
    """A ContextCache extends each actor's text with what is new to it; after every round of
    messages it equals the context read whole, also in a later run continuing the session."""
    path = tmp_path_factory.mktemp("kept") / "dialog.db"
    with Store(path) as store:
        session = store.open_session()
        contexts = ContextCache(store)
        for batch in rounds[:-1]:
            store.submit(session, [NewMessage(k, t, souls=s, users=u) for k, s, u, t in batch])
            for soul, user in actors:
                kept = contexts.text(session, soul=soul, user=user)
                assert kept == builtin_context(store, session, soul=soul, user=user)
    with Store(path) as store:  # the next run: older lines come from the database
        contexts = ContextCache(store)
        batch = rounds[-1]
        for soul, user in actors:
            contexts.text(session, soul=soul, user=user)
        store.submit(session, [NewMessage(k, t, souls=s, users=u) for k, s, u, t in batch])
        for soul, user in actors:
            kept = contexts.text(session, soul=soul, user=user)
            assert kept == builtin_context(store, session, soul=soul, user=user)
            bounded = contexts.text(session, soul=soul, user=user, last=1)
            assert bounded == builtin_context(store, session, soul=soul, user=user, last=1)


def test_context_format_and_default_deny(shared_store) -> None:
    store = shared_store
    session = store.open_session()
    store.add_message(session, "narration", "Night falls.", souls=["1", "2"])
    store.add_message(session, "reply", "I am the seer.", souls=["1", "2"], speaker_name="@Eve")
    store.add_message(session, "reply", "Wolves only.", souls=["2"], speaker_name="@Wolf")
    store.add_message(session, "human", "Hello", souls=["1"], users=["7"], speaker_name="@Ann")
    store.add_message(session, "prompt", "private", souls=["1"])
    store.add_message(session, "feedback", "Use @name.", souls=["1"])
    # a prompt and a retry's feedback are in nobody's context (§13.1)
    assert builtin_context(store, session, soul="1") == (
        "[narrator]: Night falls.\n\n[@Eve]: I am the seer.\n\n[@Ann]: Hello"
    )
    assert builtin_context(store, session, soul="3") == ""
    assert builtin_context(store, session, soul=None, user="7") == "[@Ann]: Hello"
    assert builtin_context(store, session, soul="2") == (
        "[narrator]: Night falls.\n\n[@Eve]: I am the seer.\n\n[@Wolf]: Wolves only."
    )


def test_format_context_falls_back_to_the_soul() -> None:
    message = Message(id=1, session=1, seq=1, kind="reply", content="x", speaker_soul="9")
    assert format_context([message]) == "[9]: x"


def test_reasoning_is_in_nobodys_context() -> None:
    """Stored for the executor's soul, a model's reasoning is not part of its context (§13.1)."""
    with Store(":memory:") as store:
        session = store.open_session("new")
        store.submit(
            session,
            [
                NewMessage("reasoning", "I am the wolf.", souls=["1"], speaker_name="@Wolf"),
                NewMessage("reply", "Good night.", souls=["1", "2"], speaker_name="@Wolf"),
            ],
        )
        store.flush()
        assert builtin_context(store, session, soul="1") == "[@Wolf]: Good night."
    thought = Message(id=1, session=1, seq=1, kind="reasoning", content="x", speaker_name="@W")
    assert format_context([thought]) == ""


def test_method_kwargs() -> None:
    frame = Variables({"alive": ["@Eve"], "@speaker": "@Eve"}, [ActorSpec("@Eve")]).root
    kwargs = method_kwargs(
        ["prompt", "session_id", "turn", "@actor", "alive", "@speaker"],
        frame,
        prompt="P",
        session=3,
        turn=5,
        actor_info={"soul": "1"},
    )
    assert kwargs == {
        "prompt": "P",
        "session_id": 3,
        "turn": 5,
        "actor_info": {"soul": "1"},
        "alive": ["@Eve"],
        "speaker": "@Eve",
    }
    with pytest.raises(RunError, match="undeclared"):
        method_kwargs(["nope"], frame)


def test_methods_run_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()

    def retrieve(prompt: str) -> str:
        assert threading.get_ident() != loop_thread
        return f"memory for {prompt}"

    assert asyncio.run(call_method(retrieve, {"prompt": "x"})) == "memory for x"


def test_an_async_method_is_awaited() -> None:
    """§8.4: an ``async def`` memory method put ``<coroutine object …>`` into the prompt."""

    async def retrieve(prompt: str) -> str:
        return f"memory for {prompt}"

    assert asyncio.run(call_method(retrieve, {"prompt": "x"})) == "memory for x"


def test_method_errors_are_run_errors() -> None:
    def broken() -> None:
        raise KeyError("k")

    with pytest.raises(RunError, match="rag raised KeyError"):
        asyncio.run(call_method(broken, {}, name="rag"))


@pytest.mark.parametrize(
    ("value", "outs", "mapped"),
    [
        ("text", ["m"], {"m": "text"}),
        ({"a": 1, "b": 2}, ["a", "b"], {"a": 1, "b": 2}),
        ({"a": 1}, ["only"], {"only": {"a": 1}}),
        ("x", [], {}),
    ],
)
def test_method_outputs(value, outs, mapped) -> None:
    assert method_outputs(value, outs) == mapped


@pytest.mark.parametrize(("value", "outs"), [("x", ["a", "b"]), ({"a": 1}, ["a", "b"])])
def test_method_outputs_errors(value, outs) -> None:
    with pytest.raises(RunError):
        method_outputs(value, outs)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        ("", ""),
        ([], ""),
        ("abc", "abc"),
        (["@a", 1], "[@a, 1]"),
        ({"a": "x", "b": ""}, "x"),
        ({"a": "x", "b": 7}, "x\n\n7"),  # a dict's values, separated by blank lines (§8.2)
        (False, "false"),  # as FEM writes it, not Python's str()
    ],
)
def test_method_text(value, text) -> None:
    assert method_text(value) == text


def build_messages(
    *,
    prompt: str,
    safety: str = "",
    style: str = "",
    persona: str = "",
    user_info: str = "",
    context: str = "",
    memory: str = "",
    narration: str = "",
) -> list[dict[str, str]]:
    """The messages of one model call (§13.3) from its blocks, as a turn's Request sends them."""
    return Request.of(
        prompt=prompt,
        system=(safety, style, persona, user_info),
        context=ContextView.of([context] if context else []),
        memory=memory,
        narration=narration,
    ).messages()


def test_build_messages_full() -> None:
    messages = build_messages(
        safety="Be safe.",
        style="Be brief.",
        persona="You are Eve.",
        user_info="Owner likes chess.",
        context="[@Bob]: hi",
        memory="Eve met Bob.",
        narration="Night falls.",
        prompt="Who do you suspect?",
    )
    assert messages == [
        {
            "role": "system",
            "content": "Be safe.\n\nBe brief.\n\nYou are Eve.\n\nOwner likes chess.",
        },
        {
            "role": "user",
            "content": f"[@Bob]: hi\n\n{MEMORY_HEADER}\nEve met Bob.\n\nNight falls.\n\nWho do you suspect?",
        },
    ]


def test_build_messages_skips_empty_blocks() -> None:
    assert build_messages(prompt="Go.", persona="  ", memory="") == [
        {"role": "user", "content": "Go."}
    ]
    assert build_messages(prompt="Go.", style="S")[0] == {"role": "system", "content": "S"}


def test_retry_messages() -> None:
    first = build_messages(prompt="Go.")
    again = retry_messages(first, "bad reply", "KILL must be alive")
    assert again[-2:] == [
        {"role": "assistant", "content": "bad reply"},
        {"role": "user", "content": "KILL must be alive"},
    ]
    assert first == [{"role": "user", "content": "Go."}]
