"""The stage (§17) in a real headless Chromium, driven through playwright's Python API.

Two werewolf games under ``fems/mock``, each in its own process with ``--serve``: one started
as ``python werewolf.py``, watched after it ended (the director sees the wolves' den talk, a
villager's view lacks it, a wolf's view has it, the flow is drawn); one started as
``fems2py run`` with the human seat, answered turn by turn from the page until the game ends.
And a run against the fake OpenAI server whose whispered reply the page shows as it streams,
under its speaker, to the director and the seat in its room only, until the stored one is in.
Screenshots of each view are saved under ``test-artifacts/stage/`` (``FEMS_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_runtime.store import Store
from playwright.sync_api import Browser, Page, sync_playwright
from stage_helpers import (
    FAREWELL,
    STAGE_URL,
    THOUGHT,
    WAIT_SECONDS,
    WHISPER,
    WHISPERED,
    before_last_word,
    remote_model,
    serving,
)

from fems2py.build import build_file
from tests.runtime.fake_openai import Behaviour, fake_openai

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "werewolf"
ARTIFACTS = Path(os.environ.get("FEMS_ARTIFACTS", ROOT / "test-artifacts")) / "stage"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("the stage tests need Debian's chromium: apt-get install chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    opened = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    opened.close()
    assert problems == [], f"the page raised: {problems}"


def screenshot(page: Page, name: str) -> None:
    """Save the top of the page (the view's note, the waiting turns, the flow)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def show_seat(page: Page, seat: str) -> None:
    """Switch the perspective and wait until the dialog shows that seat's view."""
    page.select_option("#seat", seat)
    expected = f"{seat}'s view" if seat else "Director's view"
    page.wait_for_function(
        "expected => document.getElementById('view-note').textContent.startsWith(expected)",
        arg=expected,
    )


def den_talk(page: Page) -> int:
    return page.locator('#dialog li[data-action="wolf_discuss"]:not([data-kind="prompt"])').count()


def test_the_director_sees_the_den_and_a_villager_does_not(page: Page, tmp_path: Path) -> None:
    module = build_file(EXAMPLE / "werewolf.fems", tmp_path / "werewolf.py").output
    result = tmp_path / "result.json"
    command = [sys.executable, str(module), "--model", "fems/mock", "--seed", "1"]
    command += ["--db", str(tmp_path / "game.db"), "--souls", "souls.yaml"]
    command += ["--result", str(result), "--serve"]
    with serving(command, EXAMPLE) as stage:
        url = stage.wait_for(STAGE_URL.pattern).group(1)
        stage.wait_for(r"the run has ended")
        variables = json.loads(result.read_text(encoding="utf-8"))["vars"]
        wolves = set(variables["wolves"])
        villagers = [p for p in variables["players"] if variables["role"][p] == "villager"]
        assert wolves and villagers

        page.goto(url)
        page.wait_for_selector("#dialog li")
        page.wait_for_function("document.getElementById('status').textContent === 'completed'")
        assert page.locator("#flow svg g.node").count() > 20, "the flow picture is drawn"
        show_seat(page, "")
        director_den = den_talk(page)
        assert director_den > 0
        assert page.locator('#dialog li[data-kind="narration"]').count() > 0
        screenshot(page, "director")

        show_seat(page, villagers[0])
        assert den_talk(page) == 0, f"{villagers[0]} must not see the wolves' den"
        assert page.locator("#dialog li").count() > 0
        assert page.locator('#dialog li[data-kind="prompt"]').count() == 0
        last_call = page.locator("#dialog li.last-call")
        assert last_call.count() == 1, "the villager's last model call, as sent, is shown"
        last_call.locator("summary").click()
        assert "[user]" in last_call.text_content()
        assert "wolves' den" not in last_call.text_content()
        screenshot(page, "villager")

        wolf = sorted(wolves)[0]
        show_seat(page, wolf)
        assert 0 < den_talk(page) <= director_den
        screenshot(page, "wolf")

        # A wrong token is refused, and the page writes nothing for a finished run.
        base = url.split("/?")[0]
        assert page.request.get(f"{base}/api/sessions?token=wrong").status == 403
        token = url.split("token=")[1]
        answer = page.request.post(
            f"{base}/api/answer", headers={"X-Stage-Token": token}, data={"id": 1, "text": "x"}
        )
        assert answer.status == 409


def test_fems2py_serve_lists_stored_sessions_and_opens_one_read_only(
    page: Page, tmp_path: Path
) -> None:
    module = build_file(EXAMPLE / "werewolf.fems", tmp_path / "werewolf.py").output
    database = tmp_path / "games.db"
    for seed in ("1", "2"):  # two stored games, played apart (playwright's loop runs here)
        command = [sys.executable, str(module), "--model", "fems/mock", "--seed", seed]
        command += ["--db", str(database), "--souls", str(EXAMPLE / "souls.yaml")]
        subprocess.run(command, check=True, capture_output=True, timeout=WAIT_SECONDS)
    fems2py = Path(sys.executable).parent / "fems2py"
    with serving([str(fems2py), "serve", "--db", str(database)], EXAMPLE) as stage:
        page.goto(stage.wait_for(STAGE_URL.pattern).group(1))
        links = page.locator("#session-list a")
        links.first.wait_for()
        assert links.count() == 2
        screenshot(page, "serve-sessions")
        page.get_by_text("session 1:").click()
        page.wait_for_selector("#dialog li")
        page.wait_for_function("document.getElementById('status').textContent === 'completed'")
        assert page.locator("#flow svg g.node").count() > 20
        assert den_talk(page) > 0
        assert page.locator("form.human-turn").count() == 0
        screenshot(page, "serve-session")


def test_serve_shows_forks_under_their_parent_and_each_turn_s_fork_command(
    page: Page, tmp_path: Path
) -> None:
    """Sessions as a tree (§16.4a, §17.1): a fork is listed under its parent with its branch
    turn; its page says where it branched and links to the parent; each turn shows its number
    and the command line that forks the session there."""
    module = build_file(EXAMPLE / "werewolf.fems", tmp_path / "werewolf.py").output
    database = tmp_path / "games.db"
    play = [sys.executable, str(module), "--model", "fems/mock", "--db", str(database)]
    play += ["--souls", str(EXAMPLE / "souls.yaml")]
    subprocess.run([*play, "--seed", "1"], check=True, capture_output=True, timeout=WAIT_SECONDS)
    with Store(str(database)) as store:  # the lineage of a fork, as --fork records it
        script = store.session(1)["script"]  # type: ignore[index]
        fork = store.open_session(title="the fork", script=script, parent=1, branch_turn=5)
    subprocess.run(
        [*play, "--seed", "2", "--session", str(fork)],
        check=True,
        capture_output=True,
        timeout=WAIT_SECONDS,
    )
    fems2py = Path(sys.executable).parent / "fems2py"
    with serving([str(fems2py), "serve", "--db", "games.db"], cwd=tmp_path) as stage:
        url = stage.wait_for(STAGE_URL.pattern).group(1)
        listed = "".join(line for line in stage.seen if "session" in line)
        assert "fems2py: 2 sessions in games.db:" in listed
        assert "  session 1: Werewolf at the Crossroads Inn (completed)\n" in listed
        assert "    session 2: the fork (completed), branched from session 1 after turn 5" in listed
        page.goto(url)
        child = page.locator('#session-list li[data-session="1"] > ul > li[data-session="2"]')
        child.wait_for()
        assert "branched from session 1 after turn 5" in child.text_content()
        assert page.locator('#session-list > li[data-session="2"]').count() == 0
        screenshot(page, "serve-tree")

        child.locator("a").first.click()
        page.wait_for_selector("#dialog li")
        lineage = page.locator("#lineage")
        assert "branched from session 1 after its turn 5" in lineage.text_content()
        forks = page.locator("#dialog details.fork")
        turns = [int(forks.nth(i).get_attribute("data-turn") or 0) for i in range(forks.count())]
        assert turns and turns == sorted(set(turns)), "one fork command per turn, in order"
        third = page.locator('#dialog details.fork[data-turn="3"]')
        third.locator("summary").click()
        assert "turn 3" in third.locator("summary").text_content()
        commands = [c.text_content() for c in third.locator("code").all()]
        assert commands == [
            "python werewolf.py --db games.db --fork 2:3",
            "fems2py run werewolf.fems --db games.db --fork 2:3",
        ]
        screenshot(page, "serve-fork-commands")
        lineage.locator("a").click()
        page.wait_for_function("document.getElementById('title').textContent.endsWith('session 1')")
        assert page.locator("#lineage").is_hidden()


FLOW_BOUNDS = """() => {
    const frame = document.getElementById('flow').getBoundingClientRect();
    const nodes = [...document.querySelectorAll('#flow svg g.node')].map(
        (node) => node.getBoundingClientRect()
    );
    const inside = nodes.filter(
        (n) => n.left >= frame.left - 1 && n.right <= frame.right + 1
            && n.top >= frame.top - 1 && n.bottom <= frame.bottom + 1
    );
    const widest = Math.max(...nodes.map((n) => n.width));
    const svg = document.querySelector('#flow svg');
    return {nodes: nodes.length, inside: inside.length, widest, zoom: Number(svg.dataset.zoom),
            viewBox: svg.getAttribute('viewBox')};
}"""


def test_the_flow_picture_fits_its_panel_and_zooms_and_pans(page: Page, tmp_path: Path) -> None:
    """The werewolf chart, wider than its panel, is shown whole (§17.1); the buttons and the
    wheel zoom it, a drag moves it, "fit" shows it whole again."""
    module = build_file(EXAMPLE / "werewolf.fems", tmp_path / "werewolf.py").output
    database = tmp_path / "game.db"
    command = [sys.executable, str(module), "--model", "fems/mock", "--seed", "1"]
    command += ["--db", str(database), "--souls", str(EXAMPLE / "souls.yaml")]
    subprocess.run(command, check=True, capture_output=True, timeout=WAIT_SECONDS)
    fems2py = Path(sys.executable).parent / "fems2py"
    serve = [str(fems2py), "serve", "--db", str(database), "--session", "1"]
    with serving(serve, EXAMPLE) as stage:
        page.set_viewport_size({"width": 1100, "height": 800})
        page.goto(stage.wait_for(STAGE_URL.pattern).group(1))
        page.wait_for_selector("#flow svg g.node")
        fitted = page.evaluate(FLOW_BOUNDS)
        assert fitted["nodes"] > 20
        assert fitted["inside"] == fitted["nodes"], "every node is inside the panel"
        assert fitted["zoom"] == 1
        screenshot(page, "flow-fitted")

        page.click("#zoom-in")
        page.click("#zoom-in")
        zoomed = page.evaluate(FLOW_BOUNDS)
        assert zoomed["zoom"] > 1.5
        assert zoomed["widest"] > fitted["widest"] * 1.5, "nodes are drawn bigger"
        assert zoomed["inside"] < zoomed["nodes"], "part of the flow is now out of view"

        box = page.locator("#flow").bounding_box()
        assert box is not None
        middle = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.move(*middle)
        page.mouse.down()
        page.mouse.move(middle[0] + 120, middle[1] + 60, steps=4)
        page.mouse.up()
        dragged = page.evaluate(FLOW_BOUNDS)
        assert dragged["viewBox"] != zoomed["viewBox"] and dragged["zoom"] == zoomed["zoom"]
        screenshot(page, "flow-zoomed")

        page.mouse.wheel(0, 400)  # wheel down: zoom out
        page.wait_for_function(
            "zoom => Number(document.querySelector('#flow svg').dataset.zoom) < zoom",
            arg=dragged["zoom"],
        )
        page.click("#zoom-fit")
        assert page.evaluate(FLOW_BOUNDS) == fitted


def test_a_human_seat_plays_from_the_page_to_the_end(page: Page, tmp_path: Path) -> None:
    fems2py = Path(sys.executable).parent / "fems2py"
    command = [str(fems2py), "run", "werewolf.fems", "--model", "fems/mock", "--seed", "1"]
    command += ["--db", str(tmp_path / "game.db"), "--souls", "souls.yaml", "--serve"]
    with serving(command, EXAMPLE, env={"WEREWOLF_HUMAN": "1"}) as stage:
        url = stage.wait_for(STAGE_URL.pattern).group(1)
        page.goto(url)
        page.wait_for_selector("#flow svg g.node")
        answered = 0
        while True:
            page.wait_for_function(
                "document.querySelector('form.human-turn') ||"
                " document.getElementById('status').textContent === 'completed'",
                timeout=WAIT_SECONDS * 1000,
            )
            form = page.locator("form.human-turn").first
            if form.count() == 0:
                break
            assert form.get_attribute("data-actor") == "@you"
            turn = form.get_attribute("data-turn")
            menus = form.locator("select[data-out]")
            if answered == 0:
                # the run waits on a marked node of the flow, and a menu must be answered
                assert page.locator("#flow g.node.running").count() >= 1
                assert menus.count() >= 1
                screenshot(page, "human-turn")
                form.locator("button[type=submit]").click()
                page.wait_for_function(
                    "document.querySelector('form.human-turn .problem').textContent !== ''"
                )
                assert "an answer is needed" in form.locator(".problem").text_content()
            form.locator("textarea").fill(f"My answer number {answered + 1}, typed in the page.")
            for index in range(menus.count()):
                menus.nth(index).select_option(index=1)
            typed = form.locator("input[data-out]")
            for index in range(typed.count()):
                typed.nth(index).fill("true")
            form.locator("button[type=submit]").click()
            page.wait_for_selector(f'form.human-turn[data-turn="{turn}"]', state="detached")
            answered += 1
        stage.wait_for(r"completed in \d+ steps")
        assert answered >= 3, "the human seat played several turns"
        page.wait_for_function("document.getElementById('status').textContent === 'completed'")
        show_seat(page, "")
        said = page.locator('#dialog li[data-kind="human"]')
        # every answer is stored as the person's message, and the page shows all of them
        page.wait_for_function(
            "count => document.querySelectorAll('#dialog li[data-kind=human]').length === count",
            arg=answered,
        )
        assert "typed in the page" in said.first.text_content()
        screenshot(page, "human-game-over")


WRITING = '#dialog li.writing[data-speaker="@Ann"]'


def seat_state_after(page: Page, seat: str, version: int) -> None:
    """Wait until the page has the state of ``seat``'s event stream at ``version`` or later."""
    page.wait_for_function(
        "([seat, version]) => stage.state && stage.state.seat === seat"
        " && stage.state.version >= version",
        arg=[seat, version],
    )


def test_the_page_shows_a_reply_under_its_speaker_while_it_streams(
    page: Page, tmp_path: Path
) -> None:
    """The fake server holds the whisper's last word until the page has shown the rest: the
    director sees it being written, with its reasoning folded; Max, outside its room, sees
    nothing of it; Bob sees it without the reasoning; then the stored reply takes its place."""
    hold = threading.Event()
    (tmp_path / "whisper.fems").write_text(textwrap.dedent(WHISPER), encoding="utf-8")
    fems2py = Path(sys.executable).parent / "fems2py"
    command = [str(fems2py), "run", "whisper.fems", "--db", "game.db", "--serve"]
    with fake_openai() as server:
        server.queue(Behaviour(text=WHISPERED, reasoning=THOUGHT, hold=hold))
        server.queue(Behaviour(text=FAREWELL))
        remote_model(tmp_path, server.api_base)
        with serving(command, tmp_path) as run:
            page.goto(run.wait_for(STAGE_URL.pattern).group(1))
            writing = page.locator(WRITING)
            partial = before_last_word(WHISPERED)
            page.wait_for_function(
                "([selector, text]) => document.querySelector(selector + ' > .text')"
                "?.textContent === text",
                arg=[WRITING, partial],
            )
            assert writing.locator(".who").text_content() == "@Ann"
            assert writing.locator(".marker").text_content() == "writing…"
            assert writing.locator("details.reasoning .text").text_content() == THOUGHT
            version = page.evaluate("stage.state.version")
            screenshot(page, "writing-director")

            show_seat(page, "@Max")
            seat_state_after(page, "@Max", version)
            assert page.locator("#dialog li.writing").count() == 0, "Max is not in its room"

            show_seat(page, "@Bob")
            writing.locator(".text").filter(has_text=partial).wait_for()
            assert writing.locator("details.reasoning").count() == 0, "reasoning is private"
            screenshot(page, "writing-bob")

            hold.set()
            page.locator('#dialog li[data-kind="reply"]').filter(has_text=WHISPERED).wait_for()
            page.wait_for_function("document.getElementById('status').textContent === 'completed'")
            assert page.locator("#dialog li.writing").count() == 0
            replies = page.locator('#dialog li[data-kind="reply"] > .text')
            assert replies.all_text_contents() == [WHISPERED, FAREWELL]
            screenshot(page, "written")
