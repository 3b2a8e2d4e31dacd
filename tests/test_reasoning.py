"""A model's private reasoning (§13.1): cut out of the reply before signals are read, stored
with the executor's soul only, traced, and in nobody's context, the executor's own later turns
included."""

from __future__ import annotations

import io
from pathlib import Path

from fems_helpers import llm_calls, run_script
from fems_runtime.store import Store
from fems_runtime.transcript import Transcript

SCRIPT = """
vars:
    kill = ""
    decoy = 0

actors:
    ai @god
    ai @wolf
    ai @seer
    ai @villager

action wolf_kill @ai(@wolf):
    prompt: Night falls. Who dies tonight?
    scope: [@god]
    out: kill(actor)

action wolf_after @ai(@wolf):
    prompt: Anything to add?
    scope: [@god]

action seer_look @ai(@seer):
    prompt: Whom do you watch?
    scope: [@god, @wolf, @seer, @villager]

action day_talk @ai(@villager):
    prompt: The sun rises. Speak.
    scope: [@god, @wolf, @seer, @villager]

mainflow:
    [START] -> wolf_kill -> wolf_after -> seer_look -> day_talk -> [END]
"""

THOUGHTS = "I am secretly the wolf and must hide it. SET VARIABLE: <<decoy = 1>>"
WOLF_REPLY = f"<think>{THOUGHTS}</think>The seer looks suspicious. SET VARIABLE: <<kill = @seer>>"
REPLIES = {
    "wolf_kill": [WOLF_REPLY],
    "wolf_after": ["Nothing more."],
    "seer_look": ["I watch the wolf."],
    "day_talk": ["Good morning."],
}


def _sent(call: dict[str, object]) -> str:
    return "\n".join(str(m["content"]) for m in call["messages"])  # type: ignore[attr-defined,index]


def test_the_wolfs_thoughts_reach_nobody_and_their_signal_does_not_count(tmp_path: Path) -> None:
    db = tmp_path / "game.db"
    result, events = run_script(tmp_path, SCRIPT, replies=REPLIES, db=str(db))
    assert result.variables["kill"] == "@seer"
    assert result.variables["decoy"] == 0  # the signal inside the thoughts is not applied
    calls = llm_calls(events)
    (kill,) = [c for c in calls if c["action"] == "wolf_kill"]
    assert kill["reasoning"] == THOUGHTS
    assert kill["reply"] == "The seer looks suspicious. SET VARIABLE: <<kill = @seer>>"
    later = [c for c in calls if c["action"] != "wolf_kill"]
    assert {c["actor"] for c in later} == {"@wolf", "@seer", "@villager"}
    for call in later:  # the wolf's next turn included
        assert "secretly" not in _sent(call), call["action"]
    (after,) = [c for c in later if c["action"] == "wolf_after"]
    assert "[@wolf]: The seer looks suspicious." in _sent(after)  # the reply itself stays
    with Store(str(db)) as store:
        stored = store.messages(result.session)
        (thought,) = [m for m in stored if m.kind == "reasoning"]
        assert (thought.content, thought.speaker_name) == (THOUGHTS, "@wolf")
        assert thought.speaker_soul == "wolf"  # souls are named after their actors
        for soul in ("god", "wolf", "seer", "villager"):  # the wolf's own soul included
            seen = store.visible_messages(result.session, soul=soul)
            assert seen and all("secretly" not in m.content for m in seen)


def test_the_transcript_folds_the_reasoning(tmp_path: Path) -> None:
    out = io.StringIO()
    transcript = Transcript(everyone=["@god", "@wolf", "@seer", "@villager"], stream=out)
    run_script(tmp_path, SCRIPT, replies=REPLIES, transcript=transcript)
    shown = out.getvalue()
    assert "secretly" not in shown
    assert f"@wolf reasoned ({len(THOUGHTS)} characters)" in shown
    assert "The seer looks suspicious." in shown
