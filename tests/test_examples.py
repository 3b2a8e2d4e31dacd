"""The small examples run offline with their replies files and reach their scripted outcome.

Each example is built once and run in-process under `fems/script` (its `replies.json`); the
final variables are checked, and the traces are checked for what each example is about: the
reviewer's retry with feedback, who heard the town's secret, which researcher won the race,
who was in the tea house's rooms.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import llm_calls, load, read_trace, sent_text

from fems2py.build import build_file
from fems2py.frontend import analyze

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class Run:
    """One finished run: final variables and model calls (from the trace)."""

    variables: dict[str, Any]
    calls: list[dict[str, Any]]

    def calls_of(self, action: str, actor: str | None = None) -> list[dict[str, Any]]:
        return [
            call
            for call in self.calls
            if call["action"] == action and (actor is None or call["actor"] == actor)
        ]


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*/*.fems")), ids=lambda p: p.stem)
def test_every_example_checks_clean(script: Path) -> None:
    _, diagnostics = analyze(script)
    assert [d.format() for d in diagnostics] == []


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    done = {}
    for name in ("code_review", "town", "race", "tea_house", "audit"):
        root = tmp_path_factory.mktemp(name)
        folder = EXAMPLES / name
        module = load(build_file(folder / f"{name}.fems", root / f"{name}.py").output)
        trace = root / "trace.jsonl"
        outcome = module.run(
            replies=str(folder / "replies.json"),
            db=f"sqlite:///{root / 'run.db'}",
            trace=trace,
            root=folder,  # the module is built elsewhere: its tools read the example's folder
        )
        assert outcome.status == "completed"
        events = read_trace(trace)
        calls = llm_calls(events)
        done[name] = Run(outcome.variables, calls)
    return done


@pytest.mark.parametrize(
    ("example", "name", "expected"),
    [
        ("code_review", "approved", ["@Ada"]),
        ("code_review", "rejected", ["@Grace"]),
        ("code_review", "reviews", 6),
        ("code_review", "tests_passed", {"@Ada": 5, "@Grace": 5}),
        ("code_review", "release", True),
        ("town", "hour", 4),
        ("town", "at", {"@Ann": "tavern", "@Ben": "library", "@Cid": "tavern"}),
        ("town", "crowd", {"square": [], "tavern": ["@Ann", "@Cid"], "library": ["@Ben"]}),
        ("race", "answer", "Rayleigh scattering: air scatters short blue wavelengths most."),
        ("race", "@first", "@Curie"),
        ("race", "comments", {"@Curie": "Rayleigh it is.", "@Darwin": "Fair win."}),
        ("race", "accepted", True),
        ("tea_house", "伙计们", ["@伙计_1", "@伙计_2"]),
        ("tea_house", "茶单", {"@伙计_1": "龙井", "@伙计_2": "铁观音"}),
        ("tea_house", "最佳", "@伙计_2"),
        ("tea_house", "账本", {"茶钱": 20, "小费": 5}),
        ("tea_house", "账单", "@伙计_1：龙井；@伙计_2：铁观音 ★。共收 25 文。"),
        ("audit", "over_limit", ["travel", "meals"]),
        ("audit", "approved", False),
    ],
)
def test_final_variables(runs: dict[str, Run], example: str, name: str, expected: Any) -> None:
    assert runs[example].variables[name] == expected


def test_code_review_retries_an_invalid_verdict_with_feedback(runs: dict[str, Run]) -> None:
    reviews = runs["code_review"].calls_of("review", "@Linus")
    assert len(reviews) == 4  # maybe (rejected) → discuss, revise, goodjob
    retry = reviews[1]
    assert "maybe" in sent_text(retry)
    assert [m["role"] for m in retry["messages"]][-2:] == ["assistant", "user"]


def test_code_review_module_locals_do_not_leak(runs: dict[str, Run]) -> None:
    final = runs["code_review"].variables
    for local in ("verdict", "review_round", "finish", "attempts"):
        assert local not in final


def test_code_review_refused_finish_is_rolled_back(runs: dict[str, Run]) -> None:
    # Grace's first report claims "finished" with 3 of 5 tests: the resolve hook refuses it,
    # so she writes code four times (two sandbox attempts, then two more reviews).
    assert len(runs["code_review"].calls_of("write_code", "@Grace")) == 4


def test_town_tavern_guests_follow_the_moves(runs: dict[str, Run]) -> None:
    assert sorted(runs["town"].variables["tavern_guests"]) == ["@Ann", "@Cid"]
    assert len(runs["town"].calls_of("serve", "@Mags")) == 2  # nobody in the tavern at hour 2


@pytest.mark.parametrize(
    ("actor", "heard"), [("@Ann", True), ("@Cid", True), ("@Ben", False), ("@Mags", False)]
)
def test_town_secret_is_heard_only_in_the_library(
    runs: dict[str, Run], actor: str, heard: bool
) -> None:
    calls = [call for call in runs["town"].calls if call["actor"] == actor]
    assert calls
    assert any("oak stone" in sent_text(call) for call in calls) is heard


def test_town_lines_are_scoped_to_the_place(runs: dict[str, Run]) -> None:
    first_hour = runs["town"].calls_of("talk")[:3]
    assert [sorted(call["scope"]) for call in first_hour] == [
        ["@Ann", "@Cid"],
        ["@Ben"],
        ["@Ann", "@Cid"],
    ]


def test_audit_tool_results_reach_the_auditor_but_never_the_manager(runs: dict[str, Run]) -> None:
    audit = runs["audit"]
    # the auditor's last call carries the results of its tool rounds (books.py, §15.5)
    last = audit.calls_of("audit", "@auditor")[-1]
    results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert results[:3] == ["1488.8", "250.6", "193.99"]
    assert "flight to Lisbon (booked late)" in results[3]
    # the report turn (same auditor, the manager's room) sees the clerk's room's tool traffic
    report = sent_text(audit.calls_of("report", "@auditor")[0])
    assert "[tool read]: # Expense policy (March)" in report
    # the manager was in no room where a tool ran: none of the raw results reach it
    decide = sent_text(audit.calls_of("decide", "@manager")[0])
    assert "Expense policy (March)" not in decide
    assert "flight to Lisbon (booked late)" not in decide
    assert "1488.80 of 1200.00" in decide  # only what the auditor told it


def test_race_cancels_the_slower_researcher(runs: dict[str, Run]) -> None:
    race = runs["race"]
    assert race.calls_of("curie_answers")
    assert not race.calls_of("darwin_answers")
    assert len(race.calls_of("darwin_comments")) == 1


def test_tea_house_spawned_helpers_brew_in_their_own_rooms(runs: dict[str, Run]) -> None:
    run = runs["tea_house"]
    brews = {call["actor"]: set(call["scope"]) for call in run.calls_of("泡茶")}
    assert brews == {"@伙计_1": {"@王掌柜", "@伙计_1"}, "@伙计_2": {"@王掌柜", "@伙计_2"}}
    (tasting,) = run.calls_of("品茶", "@常四爷")
    assert set(tasting["scope"]) == {"@常四爷", "@王掌柜", "@伙计_1", "@伙计_2"}
