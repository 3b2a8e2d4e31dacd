"""The werewolf example plays to the end offline, and night secrets stay in their rooms.

One build, then twenty games under `fems/mock` (one seed each), played in-process through the
generated module's `run()`. Every game must complete with a winner within the day cap; the
traces must show that no villager, seer or witch model call ever contained the wolves' den
talk, and that the seer's answers reached nobody but the seer and the moderator.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from fems_helpers import llm_calls, load, read_trace, sent_text

from fems2py.build import build_file

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "werewolf"
SEEDS = range(20)
MODERATOR = "@Moderator"
MAX_DAYS = 10
BALLOT = re.compile(r"<<\s*@ballot\s*=\s*(@\w+)\s*>>")


@dataclass(frozen=True)
class Game:
    """One finished game: its final variables and its model calls, from the trace."""

    seed: int
    variables: dict[str, Any]
    events: list[dict[str, Any]]

    @property
    def calls(self) -> list[dict[str, Any]]:
        return llm_calls(self.events)

    @property
    def wolves(self) -> set[str]:
        return set(self.variables["wolves"])

    def calls_of(self, action: str) -> list[dict[str, Any]]:
        return [call for call in self.calls if call["action"] == action]


@pytest.fixture(scope="module")
def werewolf(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    root = tmp_path_factory.mktemp("build")
    return load(build_file(EXAMPLE / "werewolf.fems", root / "werewolf.py").output)


@pytest.fixture(scope="module")
def games(werewolf: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Game]:
    root = tmp_path_factory.mktemp("werewolf")
    played = {}
    for seed in SEEDS:
        trace = root / f"trace-{seed}.jsonl"
        outcome = werewolf.run(
            model="fems/mock",
            seed=seed,
            souls=EXAMPLE / "souls.yaml",
            db=f"sqlite:///{root / 'games.db'}",
            trace=trace,
        )
        assert outcome.status == "completed"
        events = read_trace(trace)
        played[seed] = Game(seed, outcome.variables, events)
    return played


@pytest.mark.parametrize("seed", SEEDS)
def test_every_game_ends_with_a_winner_within_the_day_cap(
    games: dict[int, Game], seed: int
) -> None:
    final = games[seed].variables
    assert final["winner"] in ("villagers", "werewolves")
    assert final["win_reason"]
    assert 1 <= final["day"] <= MAX_DAYS
    assert games[seed].calls_of("curtain"), "the post-game chat did not run"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_winner_agrees_with_the_survivors(games: dict[int, Game], seed: int) -> None:
    game = games[seed]
    alive = game.variables["alive"]
    wolves = sum(1 for player in alive if player in game.wolves)
    if wolves == 0:
        assert game.variables["winner"] == "villagers"
    elif wolves >= len(alive) - wolves:
        assert game.variables["winner"] == "werewolves"
    else:
        assert game.variables["day"] == MAX_DAYS


@pytest.mark.parametrize("seed", SEEDS)
def test_each_actor_speaks_with_its_own_persona(games: dict[int, Game], seed: int) -> None:
    souls = yaml.safe_load((EXAMPLE / "souls.yaml").read_text(encoding="utf-8"))["souls"]
    for call in games[seed].calls:
        system = call["messages"][0]
        assert system["role"] == "system"
        persona = souls[call["actor"][1:].lower()]["persona"].strip()
        assert persona in system["content"]


@pytest.mark.parametrize("seed", SEEDS)
def test_only_the_pack_and_the_moderator_sit_in_the_den(games: dict[int, Game], seed: int) -> None:
    game = games[seed]
    den = game.calls_of("wolf_discuss")
    assert den, "the wolves never met"
    for call in den:
        assert call["actor"] in game.wolves
        assert set(call["scope"]) <= game.wolves | {MODERATOR}


@pytest.mark.parametrize("seed", SEEDS)
def test_the_den_talk_never_reaches_the_village(games: dict[int, Game], seed: int) -> None:
    game = games[seed]
    den_talk = [call["reply"] for call in game.calls_of("wolf_discuss")]
    outsiders = [call for call in game.calls if call["actor"] not in game.wolves | {MODERATOR}]
    assert outsiders
    for call in outsiders:
        seen = sent_text(call)
        assert "wolf_pick" not in seen, (call["action"], call["actor"])
        for talk in den_talk:
            assert talk not in seen, (call["action"], call["actor"])


def _private_prompt_fragments() -> dict[str, list[str]]:
    """Per AI/mind action, the fixed parts of its prompt (no placeholders) that are long enough
    to belong to it alone. A prompt is private to its executor (§13.1)."""
    from fems2py.parser import parse

    script, _ = parse((EXAMPLE / "werewolf.fems").read_text(encoding="utf-8"), "werewolf.fems")
    fragments: dict[str, list[str]] = {}
    for action in script.actions:
        if action.prompt is None or action.kind not in ("ai", "mind"):
            continue
        pieces = re.split(r"\{[^{}]*\}|\n", action.prompt.value.value)
        fragments[action.name] = [p.strip() for p in pieces if len(p.strip()) >= 30]
    return fragments


PROMPT_FRAGMENTS = _private_prompt_fragments()


@pytest.mark.parametrize("seed", SEEDS)
def test_no_prompt_reaches_another_turn(games: dict[int, Game], seed: int) -> None:
    """Nobody's prompt text is in any other action's model call, whoever the actor."""
    assert sum(map(len, PROMPT_FRAGMENTS.values())) >= 10
    for call in games[seed].calls:
        seen = sent_text(call)
        for action, fragments in PROMPT_FRAGMENTS.items():
            for fragment in fragments:
                # its own call carries it (so the check is not vacuous); no other call does
                assert (fragment in seen) == (action == call["action"]), (
                    call["action"],
                    call["actor"],
                    action,
                    fragment,
                )


@pytest.mark.parametrize("seed", SEEDS)
def test_the_seer_alone_learns_the_answers(games: dict[int, Game], seed: int) -> None:
    game = games[seed]
    seer = game.variables["@seer"]
    answers = game.variables["seer_log"]
    for call in game.calls:
        if call["actor"] not in (seer, MODERATOR):
            assert "Seer check" not in sent_text(call), (call["action"], call["actor"])
    if answers:
        told = [
            call for call in game.calls if call["actor"] == seer and answers[0] in sent_text(call)
        ]
        assert told, "the seer never heard the first answer"


@pytest.mark.parametrize("seed", SEEDS)
def test_each_ballot_is_recorded_under_its_voter(games: dict[int, Game], seed: int) -> None:
    # The votes run concurrently (`par`), each setting its own @ballot; record_vote files it
    # under `votes.@voter`. The ballot box the tally receives must hold every voter's own choice.
    cast: dict[str, str] = {}
    for event in games[seed].events:
        if event["event"] == "llm_call" and event["action"] == "vote":
            ballot = BALLOT.search(event["reply"])
            assert ballot is not None
            cast[event["actor"]] = ballot.group(1)
        elif event["event"] == "func" and event["action"] == "tally":
            assert event["inputs"]["votes"] == cast
            assert sorted(cast) == sorted(event["inputs"]["alive"])
            cast = {}
    assert not cast, "ballots were cast but never counted"


HUMAN_ANSWER_SETS = {
    "wolf_discuss": {"wolf_pick.@wolf": "@Alice"},
    "seer_pick": {"seer_target": "@Bob"},
    "witch_turn": {"witch_choice": "poison", "@witch_target": "@Cleo"},
    "vote": {"@ballot": "@Dan"},
    "reveal": {"revealed.@speaker": True},
}


@pytest.mark.parametrize("seed", range(3))
def test_a_human_can_take_a_seat(
    werewolf: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # WEREWOLF_HUMAN puts the human actor @you in the last seat; every player action is @mind,
    # so @you's turns go to the answers file while the AI seats keep playing.
    answers = {
        action: [{"text": f"(@you, {action})", "vars": values}] * 30
        for action, values in HUMAN_ANSWER_SETS.items()
    }
    answers["*"] = ["I keep my eyes open and my words few."]
    answers_file = tmp_path / "answers.json"
    answers_file.write_text(json.dumps(answers), encoding="utf-8")
    monkeypatch.setenv("WEREWOLF_HUMAN", "1")
    trace = tmp_path / "trace.jsonl"
    outcome = werewolf.run(
        model="fems/mock",
        seed=seed,
        human=str(answers_file),
        db=f"sqlite:///{tmp_path / 'game.db'}",
        trace=trace,
    )
    events = read_trace(trace)
    assert outcome.variables["players"][-1] == "@you"
    assert outcome.variables["winner"] in ("villagers", "werewolves")
    assert outcome.variables["revealed"]["@you"] is True
    assert any(e["event"] == "human" and e["actor"] == "@you" for e in events)
    assert not any(e["event"] == "llm_call" and e["actor"] == "@you" for e in events)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_dead_stay_silent(games: dict[int, Game], seed: int) -> None:
    # Who is alive is known at every win check (dawn and dusk); until the next check, only
    # those players may speak, vote or act at night.
    alive: set[str] = set(games[seed].variables["players"])
    acting = {"wolf_discuss", "seer_pick", "witch_turn", "speak", "vote"}
    for event in games[seed].events:
        if event["event"] == "func" and event["action"] == "check_win":
            alive = set(event["inputs"]["alive"])
        elif event["event"] == "llm_call" and event["action"] in acting:
            assert event["actor"] in alive, (event["action"], event["actor"])


@pytest.mark.parametrize("seed", SEEDS)
def test_only_the_exiled_say_last_words(games: dict[int, Game], seed: int) -> None:
    voters: set[str] = set()
    speakers: list[str] = []
    for event in games[seed].events:
        if event["event"] == "func" and event["action"] == "tally":
            voters = set(event["inputs"]["alive"])
        elif event["event"] == "llm_call" and event["action"] == "last_words":
            speakers.append(event["actor"])
        elif event["event"] == "func" and event["action"] == "check_win" and speakers:
            (exiled,) = speakers
            assert exiled in voters
            assert exiled not in event["inputs"]["alive"]
            speakers = []


@pytest.mark.parametrize("seed", SEEDS)
def test_each_potion_is_used_at_most_once(games: dict[int, Game], seed: int) -> None:
    nights = [
        event["inputs"]
        for event in games[seed].events
        if event["event"] == "func" and event["action"] == "resolve_night"
    ]
    assert sum(1 for night in nights if night["saved"]) <= 1
    assert sum(1 for night in nights if night["poisoned"]) <= 1
    assert games[seed].variables["antidote"] in (0, 1)
    assert games[seed].variables["poison"] in (0, 1)


def test_a_silent_table_still_ends(werewolf: ModuleType, tmp_path: Path) -> None:
    # Replies without any signal: the wolves never name a victim, the seer never picks, nobody
    # votes. The rules repair every missing choice, so the game still ends with a winner.
    outcome = werewolf.run(
        replies={"*": ["I would rather not say."]}, db=f"sqlite:///{tmp_path / 'game.db'}"
    )
    final = outcome.variables
    assert final["winner"] in ("villagers", "werewolves")
    assert final["@exiled"] == ""  # every ballot was blank
    assert 1 <= final["day"] <= MAX_DAYS


def _rules() -> ModuleType:
    return load(EXAMPLE / "game.py")


ROLES = {"@w1": "wolf", "@w2": "wolf", "@s": "seer", "@v1": "villager", "@v2": "villager"}


@pytest.mark.parametrize(
    ("alive", "day", "winner"),
    [
        (["@w1", "@s", "@v1"], 3, ""),
        (["@s", "@v1", "@v2"], 2, "villagers"),
        (["@w1", "@w2", "@s", "@v1"], 1, "werewolves"),
        (["@w1", "@s"], 4, "werewolves"),
        (["@w1", "@s", "@v1"], MAX_DAYS, "villagers"),
        (["@w1", "@w2", "@s", "@v1", "@v2"], MAX_DAYS, "villagers"),
    ],
)
def test_check_win(alive: list[str], day: int, winner: str) -> None:
    outcome = _rules().check_win(alive=alive, role=ROLES, day=day, max_days=MAX_DAYS)
    assert outcome["winner"] == winner
    assert bool(outcome["win_reason"]) is bool(winner)


@pytest.mark.parametrize(
    ("picks", "rounds", "victim", "agree"),
    [
        ({"@w1": "@s", "@w2": "@s"}, 0, "@s", True),
        ({"@w1": "@s", "@w2": "@v1"}, 0, "", False),
        ({"@w1": "@s", "@w2": "@v1"}, 2, "@s", True),  # last round: first most-picked seat
        ({"@w1": "@w2", "@w2": "@w1"}, 2, "@s", True),  # no valid pick: first living prey
        ({"@w1": "@v2", "@w2": "@v2"}, 0, "", False),  # they agree on a dead player
        ({"@w1": "@v1"}, 2, "@v1", True),  # @w2 never named anyone
    ],
)
def test_wolf_consensus(picks: dict[str, str], rounds: int, victim: str, agree: bool) -> None:
    outcome = _rules().wolf_consensus(
        wolf_pick=picks,
        wolves_alive=["@w1", "@w2"],
        alive=["@w1", "@w2", "@s", "@v1"],
        role=ROLES,
        wolf_rounds=rounds,
        max_wolf_rounds=3,
    )
    assert outcome == {"@kill_target": victim, "wolves_agree": agree, "wolf_rounds": rounds + 1}
