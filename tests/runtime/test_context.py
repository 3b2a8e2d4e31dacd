"""Context (§13, §8): default-deny built-in context, method calls off the loop, model messages."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest
from fems_helpers import build_script, load, read_trace
from fems_runtime.context import (
    MEMORY_HEADER,
    ContextCache,
    ContextView,
    Request,
    _Kept,
    builtin_context,
    call_method,
    format_context,
    method_kwargs,
    method_outputs,
    method_text,
    retry_messages,
)
from fems_runtime.records import GrowingTextDigests, RunError
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


GROWING = """
    vars:
        n = 0
    actors:
        ai @a
        ai @b
    action talk @ai(@a):
        scope: [@a, @b]
        showprompt: Night {n} falls on the village.
        prompt: Say something about turn {n}.
        out: n: int
    mainflow:
        [START] -> for i in range(12):
            -> talk ->
        -> [END]
"""


def test_an_unwatched_mock_run_never_joins_the_growing_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost of a `fems/mock` turn must not grow with the transcript: while nobody reads
    what its calls send (``--transcript`` and a cost limit read what is stored), no turn joins
    the actor's context (its entries are added, never copied); a traced run sends the whole
    of it, and the mock's replies are the same either way."""
    joined: list[int] = []
    text = _Kept.text

    def counted(kept: _Kept, count: int) -> str:
        joined.append(count)
        return text(kept, count)

    monkeypatch.setattr(_Kept, "text", counted)
    module = load(build_script(tmp_path, GROWING))
    quiet, traced = tmp_path / "quiet.db", tmp_path / "traced.db"
    module.run(model="fems/mock", seed=3, db=str(quiet), transcript=True, max_cost=1.0)
    assert joined == []
    module.run(model="fems/mock", seed=3, db=str(traced), trace=str(tmp_path / "t.jsonl"))
    assert joined == list(range(0, 23, 2))  # each turn's call: narration and reply before it
    assert _replies(quiet) == _replies(traced)
    calls = [e for e in read_trace(tmp_path / "t.jsonl") if e["event"] == "llm_call"]
    last = calls[-1]["messages"][0]["content"]  # the 11 turns before the last one
    assert last.count("[narrator]: Night") == last.count("[@a]: ") == 11


def _replies(db: Path) -> list[str]:
    with Store(db) as store:
        return [m.content for m in store.messages(1) if m.kind == "reply"]


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.text(max_size=8), max_size=4), min_size=1, max_size=6))
def test_a_growing_context_is_digested_as_its_joined_text(batches: list[list[str]]) -> None:
    """Each entry is hashed once as the context grows, yet a digest is the sha256 of the
    joined text (the digests a reuse compares with older records, §16.4a); an older, shorter
    view's text and digest are its own."""
    digests, kept = GrowingTextDigests(), _Kept()
    views = []
    for batch in batches:
        kept.entries.extend(batch)
        view = kept.view()
        views.append(view)
        whole = "\n\n".join(view.entries[: view.count])
        assert view.text == whole
        expected = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()
        assert digests.digest(view.entries, view.count) == expected
    first = views[0]
    assert first.text == "\n\n".join(batches[0])
    assert first.block(1) == ContextView.of(batches[0]).block(1)
