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


def test_the_grammar_reads_every_script_without_an_invalid_scope() -> None:
    """editors/vscode/test/grammar.test.js tokenizes every .fems file of the repository with
    VS Code's own TextMate engine (`make editor-deps` installs it)."""
    assert (VSCODE / "node_modules" / "vscode-textmate").is_dir(), "run `make editor-deps`"
    run = subprocess.run(
        ["node", "--test", "test/"], cwd=VSCODE, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "# pass 2" in run.stdout and "# fail 0" in run.stdout


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
