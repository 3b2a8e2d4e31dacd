"""examples/femwa_werewolf: a script written like the original engine's users write them builds,
and plays to a winner within its day cap unattended (`--model fems/mock --human fems/mock`).

One build, then twenty seeds in-process; one more game through `fems2py run` and one through
the generated program, which must agree with the in-process game of the same seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fems_helpers import load, read_trace, run_program

from fems2py.build import build_file
from fems2py.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "femwa_werewolf"
SCRIPT = EXAMPLE / "femwa_werewolf.fems"
SEEDS = range(20)
MAX_DAY = 5
HUMAN = "@玩家"
UNATTENDED = ["--model", "fems/mock", "--human", "fems/mock"]


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    root = tmp_path_factory.mktemp("build")
    return load(build_file(SCRIPT, root / "femwa_werewolf.py").output)


@pytest.fixture(scope="module")
def games(
    game: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[dict[str, Any], list[dict[str, Any]]]]:
    root = tmp_path_factory.mktemp("games")
    played = {}
    for seed in SEEDS:
        trace = root / f"trace-{seed}.jsonl"
        outcome = game.run(
            model="fems/mock", human="fems/mock", seed=seed, db=":memory:", trace=trace
        )
        assert outcome.status == "completed"
        played[seed] = (outcome.variables, read_trace(trace))
    return played


@pytest.mark.parametrize("seed", SEEDS)
def test_every_game_ends_with_a_winner_within_the_day_cap(games, seed) -> None:
    final, events = games[seed]
    assert final["winner"] in ("好人胜利", "狼人胜利")
    assert 1 <= final["day"] <= MAX_DAY
    wolves_alive = [p for p in final["alive"] if p in final["wolves"]]
    if final["winner"] == "好人胜利" and final["day"] < MAX_DAY:
        assert not wolves_alive
    if final["winner"] == "狼人胜利":
        assert len(wolves_alive) >= len(final["alive"]) - len(wolves_alive)
    assert not [e for e in events if e["event"] == "rejected"]  # every mock answer fits


def test_roles_come_from_the_python_file_and_the_human_seat_plays(games) -> None:
    for final, events in games.values():
        roles = sorted(final["role"].values())
        assert roles == sorted(["狼人", "狼人", "预言家", "村民", "村民", "村民"])
        assert final["@预言家"] == next(p for p, r in final["role"].items() if r == "预言家")
        assert {e["actor"] for e in events if e["event"] == "human"} <= {HUMAN}
    human_actions = {
        e["action"] for _, events in games.values() for e in events if e["event"] == "human"
    }
    assert {"真人发言", "真人投票"} <= human_actions
    assert human_actions & {"狼人商量_真人", "预言家查验_真人"}  # dealt a night role sometimes


def test_both_sides_win_some_games(games) -> None:
    assert {final["winner"] for final, _ in games.values()} == {"好人胜利", "狼人胜利"}


def test_the_command_line_plays_the_same_game(games, tmp_path, capsys) -> None:
    seed = 7
    result = tmp_path / "run.json"
    argv = ["run", str(SCRIPT), *UNATTENDED, "--seed", str(seed), "--db", ":memory:"]
    assert main([*argv, "--result", str(result)]) == 0
    final = json.loads(result.read_text(encoding="utf-8"))["vars"]
    # (@VOTE is whichever voter's branch finished last, §12.5a: not part of the game's story)
    for name in ("winner", "day", "alive", "role", "votes", "计票结果", "昨夜消息"):
        assert final[name] == games[seed][0][name]
    program = tmp_path / "game.py"
    assert main(["build", str(SCRIPT), "-o", str(program), "--bundle"]) == 0
    played = run_program(program, *UNATTENDED, "--seed", str(seed), "--db", ":memory:")
    assert played.returncode == 0, played.stderr
    capsys.readouterr()
