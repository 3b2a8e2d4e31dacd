"""editors/vscode: the extension folder is usable as copied, and its grammar reads FEM."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

VSCODE = Path(__file__).resolve().parent.parent / "editors" / "vscode"
GRAMMAR = json.loads((VSCODE / "syntaxes" / "fems.tmLanguage.json").read_text(encoding="utf-8"))


def patterns(node: Any) -> Iterator[tuple[str, str]]:
    """Every (key, regex) of the grammar, nested captures included."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("match", "begin", "end") and isinstance(value, str):
                yield key, value
            else:
                yield from patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from patterns(item)


def rule(name: str) -> re.Pattern[str]:
    """The first ``match`` in the grammar whose scope names ``name``."""
    for key, regex in patterns(GRAMMAR):
        if key == "match" and name in json.dumps(_owner(GRAMMAR, regex)):
            return re.compile(regex)
    raise LookupError(name)


def _owner(node: Any, regex: str) -> Any:
    if isinstance(node, dict):
        if node.get("match") == regex:
            return node
        for value in node.values():
            found = _owner(value, regex)
            if found is not None:
                return found
    elif isinstance(node, list):
        for item in node:
            found = _owner(item, regex)
            if found is not None:
                return found
    return None


def test_the_manifest_names_files_that_exist() -> None:
    manifest = json.loads((VSCODE / "package.json").read_text(encoding="utf-8"))
    assert manifest["main"] == "./dist/extension.js"  # the esbuild bundle of src/extension.js
    grammar = manifest["contributes"]["grammars"][0]
    assert (VSCODE / grammar["path"]).is_file() and grammar["scopeName"] == GRAMMAR["scopeName"]
    language = manifest["contributes"]["languages"][0]
    assert language["extensions"] == [".fems"]
    json.loads((VSCODE / language["configuration"]).read_text(encoding="utf-8"))
    # the client is the ecosystem's, not one of our own
    assert "vscode-languageclient" in manifest["dependencies"]
    source = (VSCODE / "src" / "extension.js").read_text(encoding="utf-8")
    assert 'require("vscode-languageclient/node")' in source and "fems2py" in source
    # the debugger is fems2py's own adapter, registered on activation (test/debugger.test.js)
    assert 'require("./debug")' in source and "registerDebugger(context)" in source
    assert [debugger["type"] for debugger in manifest["contributes"]["debuggers"]] == ["fems"]


def test_the_extensions_own_tests_pass() -> None:
    """editors/vscode/test/: grammar.test.js tokenizes every .fems file of the repository with
    VS Code's own TextMate engine (`make editor-deps` installs it); debugger.test.js checks the
    `fems` debugger's contribution and runs src/debug.js against a stand-in for `vscode`;
    extension.test.js checks the language server's command line the client is given.
    Every test the files declare must have run and passed."""
    assert (VSCODE / "node_modules" / "vscode-textmate").is_dir(), "run `make editor-deps`"
    files = sorted((VSCODE / "test").glob("*.test.js"))  # not the stand-in, which tests nothing
    declared = sum(
        len(re.findall(r"^test\(", path.read_text(encoding="utf-8"), re.MULTILINE))
        for path in files
    )
    assert declared >= 10  # the grammar's tests and the debugger's
    run = subprocess.run(
        ["node", "--test", *map(str, files)],
        cwd=VSCODE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"# pass {declared}" in run.stdout and "# fail 0" in run.stdout, run.stdout


def test_the_extension_type_checks_against_the_vscode_api() -> None:
    """`npm run check`: TypeScript reads src/*.js against @types/vscode (the version of
    engines.vscode), which catches a misused API call that the stand-in of the tests would take."""
    assert (VSCODE / "node_modules" / "@types" / "vscode").is_dir(), "run `make editor-deps`"
    run = subprocess.run(
        ["npm", "run", "--silent", "check"], cwd=VSCODE, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize(("key", "regex"), list(patterns(GRAMMAR)))
def test_every_pattern_is_a_valid_regular_expression(key: str, regex: str) -> None:
    # an end pattern may refer back to its begin's captures (TextMate), Python may not
    re.compile(regex.replace(r"\1", "[ \\t]*") if key == "end" else regex)


def test_the_grammar_tells_apart_what_an_author_writes() -> None:
    header = rule("entity.name.function.action").match("action vote @ai(@voter):")
    assert header is not None and header.group(2) == "vote" and header.group(3) == "@ai"
    comment = rule("comment.line")
    assert comment.search("    prompt: see http://x.org") is None  # §1.3: no space before //
    assert comment.search("    [A] -> b   # the second try").group() == "# the second try"
    node = rule("entity.name.tag.node")
    assert [m.group() for m in node.finditer("[Night]: next -> 【白天】")] == [
        "[Night]",
        "【白天】",
    ]
    placeholder = rule("variable.other.placeholder")
    found = [m.group() for m in placeholder.finditer("You are {@speaker}, {{literal}} {@x.hp}")]
    assert found == ["{@speaker}", "{{", "}}", "{@x.hp}"]
    signal = rule("meta.signal")
    assert signal.search("设定变量：《winner = @ann》") is not None
    assert signal.search("set variable: <<x = 1>>") is not None
    block = re.compile(GRAMMAR["repository"]["block-text"]["begin"])
    assert block.match("    prompt: |") and block.match("    notes = ｜")
    assert not block.match("    [A] -> b -> c")
