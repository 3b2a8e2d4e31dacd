"""The author's Python (§5, §9.7) and system.spawn (§9.8)."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_runtime import funcs
from fems_runtime.funcs import (
    CodeFiles,
    assign_returns,
    auto_inputs,
    call_function,
    load_code,
    map_returns,
    spawn,
)
from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec
from fems_runtime.store import Store
from fems_runtime.values import Actor
from fems_runtime.variables import ActorSpec, BlueprintSpec, Variables

GAME = """
import threading

def is_over(alive):
    return len(alive) < 2

def who(actor):
    return actor["soul"], actor.get("hp", 100), isinstance(actor, str)

def thread_name():
    return threading.get_ident()

def boom():
    raise ValueError("bad input")

async def fetch(key):
    return {"key": key}

async def fails():
    raise ValueError("async bad")
"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "game.py").write_text(GAME, encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "game.py").write_text(
        "def is_over(alive):\n    return 'other'\n", encoding="utf-8"
    )
    return tmp_path


def test_load_by_path_is_cached_and_does_not_collide(code_dir: Path) -> None:
    first = load_code(code_dir / "utils" / "game.py")
    assert load_code(str(code_dir / "utils" / ".." / "utils" / "game.py")) is first
    other = load_code(code_dir / "other" / "game.py")
    assert other is not first and other.is_over([]) == "other" and first.is_over([]) is True


def test_code_files(code_dir: Path) -> None:
    files = CodeFiles({"game": "utils/game.py", "gone": "missing.py"}, code_dir)
    assert files.function("game", "is_over")([1, 2]) is False
    with pytest.raises(RunError, match="game.nope is not a function"):
        files.function("game", "nope")
    roundabout = CodeFiles({"game": "../utils/game.py"}, code_dir / "other")
    with pytest.raises(RunError) as not_there:
        roundabout.function("game", "nope")
    assert (
        str(not_there.value) == f"game.nope is not a function in {code_dir / 'utils' / 'game.py'}"
    )
    with pytest.raises(RunError) as missing:
        files.module("gone")
    assert str(missing.value) == (
        f"code file missing.py is not in {code_dir}, beside the module: copy missing.py there, "
        "or build the module with --bundle"
    )
    elsewhere = CodeFiles({"gone": "lib/missing.py"}, code_dir)
    with pytest.raises(RunError) as missing:
        elsewhere.module("gone")
    assert str(missing.value) == (
        f"code file missing.py is neither in {code_dir / 'lib'} (where it was built from) nor "
        f"in {code_dir}, beside the module: copy missing.py there, or build the module with "
        "--bundle"
    )
    roundabout = CodeFiles({"gone": "../src/missing.py"}, code_dir / "other")
    with pytest.raises(RunError, match=f"neither in {code_dir / 'src'} \\(where it was built"):
        roundabout.module("gone")
    with pytest.raises(RunError, match="not a code: alias"):
        files.module("x")


@pytest.fixture
def fresh_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Loads in a test as in a process of their own: the import path, the code folders seen and
    the loaded code files are restored afterwards, and the modules it imported are dropped."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(funcs, "_code_folders", {})
    monkeypatch.setattr(funcs, "_imports_of", {})
    monkeypatch.setattr(funcs, "_modules", {})
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _write(folder: Path, files: dict[str, str]) -> None:
    """Real files (``name → text``, folders made) under ``folder``: loading reads the disk."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


USES_RULES = "from clash_rules import WHO\n\ndef who():\n    return WHO\n"


@pytest.mark.usefixtures("fresh_imports")
def test_a_code_file_imports_the_modules_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§5: ``from rules_beside import ROLES`` works wherever the run starts, and the folder
    comes last on the import path: a file there cannot hide the standard library's, and its
    name matching a standard module's is no clash."""
    monkeypatch.chdir(tmp_path.parent)
    _write(
        tmp_path,
        {
            "rules_beside.py": "ROLES = ['wolf', 'seer']\n",
            "json.py": "raise RuntimeError('shadowed')\n",
            "types.py": "raise RuntimeError('shadowed')\n",
            "game_beside.py": "import json\nfrom rules_beside import ROLES\n\ndef roles():\n"
            "    return json.dumps(ROLES)\n",
        },
    )
    assert load_code(tmp_path / "game_beside.py").roles() == '["wolf", "seer"]'
    assert sys.path[-1] == str(tmp_path)


@pytest.mark.usefixtures("fresh_imports")
def test_code_files_share_the_modules_of_their_own_folder_silently(tmp_path: Path) -> None:
    """The common cases cost nothing and say nothing: two code files sharing the
    ``clash_rules.py`` beside them, a file loaded again (a batch worker's next run), a file
    beside nothing it imports, a folder whose ``clash_rules.py`` links to the same file."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": USES_RULES})
    _write(tmp_path / "a", {"more.py": USES_RULES})
    _write(tmp_path / "b", {"plain.py": "def who():\n    return 'plain'\n"})
    _write(tmp_path / "c", {"game.py": USES_RULES})
    (tmp_path / "c" / "clash_rules.py").symlink_to(tmp_path / "a" / "clash_rules.py")
    game = load_code(tmp_path / "a" / "game.py")
    assert (game.who(), load_code(tmp_path / "a" / "more.py").who()) == ("a", "a")
    assert load_code(tmp_path / "a" / "game.py") is game
    assert load_code(tmp_path / "b" / "plain.py").who() == "plain"
    assert load_code(tmp_path / "c" / "game.py").who() == "a"


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(USES_RULES, id="imported"),
        pytest.param("def who():\n    return 'a'\n", id="only-on-the-path"),
    ],
)
@pytest.mark.parametrize("beside", ["clash_rules.py", "clash_rules/__init__.py"])
@pytest.mark.usefixtures("fresh_imports")
def test_a_module_beside_two_code_folders_is_a_run_error(
    tmp_path: Path, first: str, beside: str
) -> None:
    """Python keeps one module per name in a process: folder b's code file would silently get
    folder a's ``clash_rules`` — imported already, or found first on the import path, where
    folder a came first. Its load stops, naming both files, and is not cached."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": first})
    _write(tmp_path / "b", {beside: "WHO = 'b'\n", "game.py": USES_RULES})
    assert load_code(tmp_path / "a" / "game.py").who() == "a"
    for _ in range(2):
        with pytest.raises(RunError) as caught:
            load_code(tmp_path / "b" / "game.py")
        assert str(caught.value) == (
            f"code file {tmp_path / 'b' / 'game.py'} has {Path(beside)} beside it, but this "
            f"process already imported 'clash_rules' from {tmp_path / 'a' / 'clash_rules.py'}, "
            "beside another code file: Python keeps one module per name, so game.py would run "
            "with that one; rename one of the two"
        )
    b_game = str(tmp_path / "b" / "game.py")
    assert not [m for m in sys.modules.values() if getattr(m, "__file__", None) == b_game]


@pytest.mark.parametrize(("first", "second"), [("a", "b"), ("b", "a")])
@pytest.mark.usefixtures("fresh_imports")
def test_the_clash_is_named_when_the_wrong_module_breaks_the_import(
    tmp_path: Path, first: str, second: str
) -> None:
    """Each folder's file imports a name only its own module has: whichever loads second fails
    to import, and the error says why, not just that the name is missing."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": USES_RULES})
    only_b = "from clash_rules import ONLY_B\n"
    _write(tmp_path / "b", {"clash_rules.py": "ONLY_B = 1\n", "game.py": only_b})
    load_code(tmp_path / first / "game.py")
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / second / "game.py")
    assert str(caught.value).startswith(f"code file {tmp_path / second / 'game.py'} has ")
    assert f"already imported 'clash_rules' from {tmp_path / first / 'clash_rules.py'}" in str(
        caught.value
    )
    assert isinstance(caught.value.__context__, ImportError)


IN_A_FUNCTION = "def who():\n    from clash_rules import WHO\n\n    return WHO\n"
PLAIN = "def who():\n    return 'plain'\n"


def _clash(code: Path, verb: str, other: Path) -> str:
    return (
        f"code file {code} has clash_rules.py beside it, but this process {verb} 'clash_rules' "
        f"from {other}, beside another code file: Python keeps one module per name, so "
        f"{code.name} would run with that one; rename one of the two"
    )


@pytest.mark.parametrize(
    ("first", "verb"),
    [
        pytest.param(USES_RULES, "already imported", id="imported"),
        pytest.param(IN_A_FUNCTION, "would import", id="in-a-function"),
        pytest.param(PLAIN, "would import", id="only-on-the-path"),
    ],
)
@pytest.mark.usefixtures("fresh_imports")
def test_a_clash_only_a_function_would_meet_is_a_run_error_at_load(
    tmp_path: Path, first: str, verb: str
) -> None:
    """Folder b's file imports ``clash_rules`` only inside a function: loading it imports
    nothing, and the call would silently get folder a's, imported already or first on the
    import path. The load reads the file's imports, stops, and imported nothing of b's."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": first})
    _write(tmp_path / "b", {"clash_rules.py": "WHO = 'b'\n", "game.py": IN_A_FUNCTION})
    load_code(tmp_path / "a" / "game.py")
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / "b" / "game.py")
    assert str(caught.value) == _clash(
        tmp_path / "b" / "game.py", verb, tmp_path / "a" / "clash_rules.py"
    )
    assert "clash_rules" not in sys.modules or first == USES_RULES


@pytest.mark.usefixtures("fresh_imports")
def test_a_function_meeting_the_later_folders_module_imported_first_is_a_run_error(
    tmp_path: Path,
) -> None:
    """The other timing: folder b's file imported its ``clash_rules`` when loaded, so folder
    a's function, loaded next, would get b's when called."""
    _write(tmp_path / "b", {"clash_rules.py": "WHO = 'b'\n", "game.py": USES_RULES})
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": IN_A_FUNCTION})
    assert load_code(tmp_path / "b" / "game.py").who() == "b"
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / "a" / "game.py")
    assert str(caught.value) == _clash(
        tmp_path / "a" / "game.py", "already imported", tmp_path / "b" / "clash_rules.py"
    )


@pytest.mark.usefixtures("fresh_imports")
def test_a_folder_first_on_the_import_path_would_give_its_module_to_another_code_folder(
    tmp_path: Path,
) -> None:
    """Folder b was on the import path before its code file was loaded (the folder of the
    program run): folder a's function, loaded first, would get b's ``clash_rules``. That
    shows once b's file, importing its own, is loaded."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": IN_A_FUNCTION})
    _write(tmp_path / "b", {"clash_rules.py": "WHO = 'b'\n", "game.py": IN_A_FUNCTION})
    sys.path.append(str(tmp_path / "b"))
    load_code(tmp_path / "a" / "game.py")
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / "b" / "game.py")
    mine = tmp_path / "b" / "clash_rules.py"
    assert str(caught.value) == (
        f"code file {tmp_path / 'b' / 'game.py'} has clash_rules.py beside it, but code beside "
        f"{tmp_path / 'a' / 'clash_rules.py'} imports 'clash_rules' too, and this process would "
        f"import it from {mine}: Python keeps one module per name, so that code would run with "
        "this one; rename one of the two"
    )


@pytest.mark.usefixtures("fresh_imports")
def test_a_clash_through_a_module_beside_is_a_run_error(tmp_path: Path) -> None:
    """The file imports ``clash_rules`` through the ``helpers.py`` beside it, both inside
    functions: the modules beside it that it imports are read too."""
    helpers = "def who():\n    import clash_rules\n\n    return clash_rules.WHO\n"
    game = "def who():\n    import helpers\n\n    return helpers.who()\n"
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": IN_A_FUNCTION})
    _write(tmp_path / "b", {"clash_rules.py": "", "helpers.py": helpers, "game.py": game})
    load_code(tmp_path / "a" / "game.py")
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / "b" / "game.py")
    assert str(caught.value) == _clash(
        tmp_path / "b" / "game.py", "would import", tmp_path / "a" / "clash_rules.py"
    )


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(USES_RULES, id="imported"),
        pytest.param(IN_A_FUNCTION, id="in-a-function"),
        pytest.param(PLAIN, id="not-at-all"),
    ],
)
@pytest.mark.usefixtures("fresh_imports")
def test_a_module_beside_code_that_does_not_import_it_is_no_clash(
    tmp_path: Path, first: str
) -> None:
    """Only folder a's code imports ``clash_rules`` (or none does): folder b's, beside nothing
    it imports, loads and runs. A file of b that imports it would get a's: that one is an
    error, the other file of b is not."""
    _write(tmp_path / "a", {"clash_rules.py": "WHO = 'a'\n", "game.py": first})
    _write(tmp_path / "b", {"clash_rules.py": "", "game.py": PLAIN, "more.py": IN_A_FUNCTION})
    assert load_code(tmp_path / "a" / "game.py").who() in ("a", "plain")
    assert load_code(tmp_path / "b" / "game.py").who() == "plain"
    with pytest.raises(RunError, match="rename one of the two"):
        load_code(tmp_path / "b" / "more.py")
    assert load_code(tmp_path / "a" / "game.py").who() in ("a", "plain")


@pytest.mark.usefixtures("fresh_imports")
def test_a_standard_module_name_beside_two_code_folders_is_no_clash(tmp_path: Path) -> None:
    """Both folders have a ``json.py`` and import ``json``, in a function or when loaded: the
    standard library's wins for both, silently, as before."""
    shadow = "raise RuntimeError('shadowed')\n"
    dump = "def dump():\n    import json\n\n    return json.dumps([1])\n"
    _write(tmp_path / "a", {"json.py": shadow, "game.py": dump})
    _write(tmp_path / "b", {"json.py": shadow, "game.py": "import json\n\n" + dump})
    assert load_code(tmp_path / "a" / "game.py").dump() == "[1]"
    assert load_code(tmp_path / "b" / "game.py").dump() == "[1]"


def test_import_errors_are_run_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise ImportError('nope')\n", encoding="utf-8")
    with pytest.raises(RunError, match="importing .*bad.py failed: ImportError: nope"):
        load_code(bad)
    (tmp_path / "sub").mkdir()
    with pytest.raises(RunError) as caught:
        load_code(tmp_path / "sub" / ".." / "bad.py")
    assert str(caught.value) == f"importing {bad} failed: ImportError: nope"


def test_calls_run_in_a_worker_thread_with_actor_values(code_dir: Path) -> None:
    files = CodeFiles({"game": "utils/game.py"}, code_dir)
    variables = Variables({"hp": {"@Eve": 7}}, [ActorSpec("@Eve", soul="3")])
    loop_thread = threading.get_ident()
    ident = asyncio.run(call_function(files.function("game", "thread_name"), {}))
    assert ident != loop_thread
    result = asyncio.run(
        call_function(files.function("game", "who"), {"actor": variables.actor("@Eve")})
    )
    assert result == ("3", 7, True)
    with pytest.raises(RunError, match="game.boom raised ValueError: bad input"):
        asyncio.run(call_function(files.function("game", "boom"), {}, name="game.boom"))
    with pytest.raises(RunError, match="calling game.is_over failed"):
        asyncio.run(call_function(files.function("game", "is_over"), {"x": 1}, name="game.is_over"))


def test_an_async_function_is_awaited(code_dir: Path) -> None:
    """§5: an ``async def`` gave its out the coroutine object (shown as ``<coroutine object
    fetch at 0x…>``) and was never run; its value is awaited, its exception a run error."""
    files = CodeFiles({"game": "utils/game.py"}, code_dir)
    assert asyncio.run(call_function(files.function("game", "fetch"), {"key": 3})) == {"key": 3}
    with pytest.raises(RunError, match="game.fails raised ValueError: async bad"):
        asyncio.run(call_function(files.function("game", "fails"), {}, name="game.fails"))


def test_auto_inputs() -> None:
    frame = Variables({"alive": [1], "day": 2}).root

    def fn(alive, day, extra=5, *args, **kwargs):
        return alive

    assert auto_inputs(fn, frame) == {"alive": [1], "day": 2}

    def needs(missing):
        return missing

    with pytest.raises(RunError, match="needs 'missing'"):
        auto_inputs(needs, frame, name="game.needs")


A, B = OutSpec("a"), OutSpec("b")


@pytest.mark.parametrize(
    ("value", "outs", "pairs"),
    [
        ({"a": 1, "b": 2}, [A, B], [(A, 1), (B, 2)]),
        ((1, 2), [A, B], [(A, 1), (B, 2)]),
        (5, [A], [(A, 5)]),
        ([1, 2], [A], [(A, [1, 2])]),
        ({"a": {"x": 1}}, [A], [(A, {"x": 1})]),
        (None, [OutSpec("a", optional=True)], []),
        ("ignored", [], []),
        ({"@预言家": "@Eve"}, [OutSpec("@预言家")], [(OutSpec("@预言家"), "@Eve")]),
        ("v", [OutSpec("votes.@voter")], [(OutSpec("votes.@voter"), "v")]),
        # §9.7: with one out, a dict that is not keyed by that out's name is its value
        ({"x": 1}, [A], [(A, {"x": 1})]),
        ({"@knight": 80, "@mage": 55}, [A], [(A, {"@knight": 80, "@mage": 55})]),
        ({}, [A], [(A, {})]),
    ],
)
def test_map_returns(value, outs, pairs) -> None:
    assert map_returns(value, outs) == pairs


@pytest.mark.parametrize(
    ("value", "outs", "message"),
    [
        ({"a": 1, "c": 3}, [A, B], "missing b; unexpected c"),
        ({"a": 1, "b": 2, "c": 3}, [A, B], "unexpected c"),
        ((1, 2, 3), [A, B], "returned 3 values but has 2 outs"),
        (1, [A, B], "returned one value"),
        (None, [A, OutSpec("b", optional=True)], "returned None"),
    ],
)
def test_map_returns_errors(value, outs, message) -> None:
    with pytest.raises(RunError, match=message):
        map_returns(value, outs, name="game.f")


def test_assign_returns_writes_entries() -> None:
    variables = Variables(
        {"votes": {}, "dead": "", "alive": []}, [ActorSpec("@Eve"), ActorSpec("@Bob")]
    )
    body = variables.root.loop({"@voter": variables.actor("@Eve")})
    assign_returns(body, "@Bob", [OutSpec("votes.@voter")])
    assign_returns(body, {"dead": "@Bob", "alive": ["@Eve"]}, [OutSpec("dead"), OutSpec("alive")])
    assert variables.root["votes"] == {"@Eve": "@Bob"}
    assert isinstance(variables.root["dead"], Actor) and variables.root["alive"] == ["@Eve"]


def test_spawn_creates_actors_from_blueprints() -> None:
    variables = Variables(
        {}, [ActorSpec("@coder_1")], [BlueprintSpec("coder", source="fast", tools=("py",))]
    )
    with Store(":memory:") as store:
        session = store.open_session()
        made = spawn(variables, [{"blueprint": "coder", "count": 2}], store=store, session=session)
        recorded = [r["name"] for r in store.session_actors(session)]
    assert made == ["@coder_2", "@coder_3"]
    assert all(isinstance(a, Actor) for a in made)
    spec = variables.actors["@coder_2"]
    assert (spec.type, spec.source, spec.tools, spec.blueprint) == ("ai", "fast", ("py",), "coder")
    assert spec.soul != variables.actors["@coder_3"].soul
    assert made[0]["source"] == "fast"
    assert recorded == ["@coder_2", "@coder_3"]
    assert spawn(variables, {"blueprint": "coder"}) == ["@coder_4"]


def test_a_large_spawn_is_recorded_in_one_write_and_numbered_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of actors at once (§9.8): one write for the session's actors, and each name
    found from the last one given, not by trying every number from 1 again."""
    variables = Variables({}, [ActorSpec("@coder_2")], [BlueprintSpec("coder")])
    writes: list[int] = []
    probed: list[str] = []
    with Store(":memory:") as store:
        session = store.open_session()
        record = store.record_actors
        monkeypatch.setattr(
            store,
            "record_actors",
            lambda s, actors: (writes.append(len(actors)), record(s, actors)),
        )
        taken = variables.actors

        class Probed(dict):  # type: ignore[type-arg]
            def __contains__(self, name: object) -> bool:
                probed.append(str(name))
                return dict.__contains__(self, name)

        variables.actors = Probed(taken)
        requests = [{"blueprint": "coder", "count": 500}, {"blueprint": "coder", "count": 500}]
        made = spawn(variables, requests, store=store, session=session)
    assert made[:2] == ["@coder_1", "@coder_3"] and made[-1] == "@coder_1001"
    assert writes == [1000]
    assert len(probed) < 2100  # the search and add_actor's check: ~2 per actor (~500,000 from 1)


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ("coder", "needs a list"),
        ([{"count": 1}], "needs a 'blueprint'"),
        ([{"blueprint": "nope"}], "no blueprint named 'nope'"),
        ([{"blueprint": "coder", "count": -1}], "count must be"),
        ([{"blueprint": "coder", "count": True}], "count must be"),
    ],
)
def test_spawn_errors(requests, message) -> None:
    variables = Variables({}, [], [BlueprintSpec("coder")])
    with pytest.raises(RunError, match=message):
        spawn(variables, requests)
