"""``fems2py lsp`` driven as an editor drives it: a real LSP client over the server's stdio."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TIMEOUT = 30  # seconds for one answer of the server on a loaded machine


class Editor:
    """One editor window on one file: what it sent, and what the server published."""

    def __init__(self, client: LanguageClient, path: Path) -> None:
        self.client = client
        self.path = path
        self.uri = from_fs_path(str(path)) or ""
        self.text = path.read_text(encoding="utf-8")
        self.version = 1
        self.published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()

    async def diagnostics(self) -> list[types.Diagnostic]:
        """The next diagnostics the server publishes for this file."""
        while True:
            published = await asyncio.wait_for(self.published.get(), TIMEOUT)
            if published.uri == self.uri:
                return list(published.diagnostics)

    def open(self) -> None:
        item = types.TextDocumentItem(self.uri, "fems", self.version, self.text)
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(item))

    def type_text(self, old: str, new: str) -> None:
        """Replace the first ``old`` with ``new``, as a keystroke-sized incremental change."""
        offset = self.text.index(old)
        start = self.position(offset)
        end = self.position(offset + len(old))
        self.text = self.text.replace(old, new, 1)
        self.version += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(version=self.version, uri=self.uri),
                [types.TextDocumentContentChangePartial(types.Range(start, end), new)],
            )
        )

    def position(self, offset: int) -> types.Position:
        before = self.text[:offset]
        return types.Position(before.count("\n"), len(before) - before.rfind("\n") - 1)

    def find(self, needle: str, occurrence: int = 0, inside: int = 1) -> types.Position:
        """The position ``inside`` characters into the ``occurrence``-th ``needle``."""
        offset = -1
        for _ in range(occurrence + 1):
            offset = self.text.index(needle, offset + 1)
        return self.position(offset + inside)

    def document(self) -> types.TextDocumentIdentifier:
        return types.TextDocumentIdentifier(self.uri)


def run_editor(path: Path, body: Callable[[Editor], Awaitable[None]]) -> None:
    """Start ``fems2py lsp``, open ``path`` in it, run ``body``, shut the server down."""

    async def session() -> None:
        client = LanguageClient("fems2py-tests", "1")
        editor = Editor(client, path)

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            editor.published.put_nowait(params)

        await client.start_io(sys.executable, "-m", "fems2py", "lsp")
        try:
            await asyncio.wait_for(
                client.initialize_async(
                    types.InitializeParams(
                        capabilities=types.ClientCapabilities(),
                        root_uri=from_fs_path(str(path.parent)),
                    )
                ),
                TIMEOUT,
            )
            client.initialized(types.InitializedParams())
            editor.open()
            await body(editor)
        finally:
            # shut the server down even when a check failed, so that no test waits on it
            try:
                await asyncio.wait_for(client.shutdown_async(None), TIMEOUT)
                client.exit(None)
            finally:
                await asyncio.wait_for(client.stop(), TIMEOUT)

    asyncio.run(session())


@pytest.fixture
def werewolf(tmp_path: Path) -> Path:
    """A copy of the werewolf example (script and its code: file), free to edit."""
    folder = tmp_path / "werewolf"
    shutil.copytree(EXAMPLES / "werewolf", folder, ignore=shutil.ignore_patterns("build"))
    return folder / "werewolf.fems"


def test_a_typo_is_reported_as_you_type_and_cleared_when_fixed(werewolf: Path) -> None:
    async def body(editor: Editor) -> None:
        assert [d for d in await editor.diagnostics() if d.severity == 1] == []
        editor.type_text('-> if (winner != "") -> [GameOver]', '-> if (winer != "") -> [GameOver]')
        problems = await editor.diagnostics()
        errors = [d for d in problems if d.severity == types.DiagnosticSeverity.Error]
        assert len(errors) == 1
        error = errors[0]
        assert "undeclared variable 'winer'" in error.message
        assert "did you mean 'winner'?" in error.message  # the checker's hint comes along
        assert error.range.start == editor.find("winer", inside=0)
        assert error.range.end.character - error.range.start.character == len("winer")
        editor.type_text("winer", "winner")
        assert [d for d in await editor.diagnostics() if d.severity == 1] == []

    run_editor(werewolf, body)


def test_definition_of_an_action_a_node_and_a_code_function(werewolf: Path) -> None:
    async def body(editor: Editor) -> None:
        await editor.diagnostics()
        client = editor.client

        async def definition(position: types.Position) -> types.Location:
            found = await asyncio.wait_for(
                client.text_document_definition_async(
                    types.DefinitionParams(editor.document(), position)
                ),
                TIMEOUT,
            )
            assert isinstance(found, types.Location)
            return found

        use = editor.find("-> speak ->", inside=4)
        found = await definition(use)
        assert found.uri == editor.uri
        assert found.range.start == editor.find("action speak @", inside=len("action "))

        node = await definition(editor.find("-> [DawnCheck]", inside=5))
        assert node.range.start == editor.find("[DawnCheck]:check_win", inside=1)

        function = await definition(editor.find("@func(game.deal)", inside=len("@func(game.")))
        assert function.uri.endswith("/werewolf/game.py")
        game = (editor.path.parent / "game.py").read_text(encoding="utf-8").split("\n")
        assert game[function.range.start.line].startswith("def deal(")

    run_editor(werewolf, body)


def test_rename_a_variable_everywhere_and_nothing_else(werewolf: Path) -> None:
    async def body(editor: Editor) -> None:
        await editor.diagnostics()
        position = editor.find("    winner = ", inside=4)
        edit = await asyncio.wait_for(
            editor.client.text_document_rename_async(
                types.RenameParams(editor.document(), position, "champion")
            ),
            TIMEOUT,
        )
        assert edit is not None and edit.changes is not None
        edits = edit.changes[editor.uri]
        lines = editor.text.split("\n")
        assert {
            lines[e.range.start.line][e.range.start.character : e.range.end.character]
            for e in edits
        } == {"winner"}
        # apply the edits from the end, then check the renamed script is still correct
        for text_edit in sorted(
            edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True
        ):
            line = lines[text_edit.range.start.line]
            lines[text_edit.range.start.line] = (
                line[: text_edit.range.start.character]
                + text_edit.new_text
                + line[text_edit.range.end.character :]
            )
        renamed = "\n".join(lines)
        assert "winner" not in renamed.replace("win_reason", "")
        editor.path.write_text(renamed, encoding="utf-8")
        from fems2py.frontend import analyze_file

        analyze_file(editor.path)  # raises CompileError if the rename broke the script

    run_editor(werewolf, body)


def test_completion_hover_and_outline(werewolf: Path) -> None:
    async def body(editor: Editor) -> None:
        await editor.diagnostics()
        client = editor.client
        after_arrow = editor.find("-> shuffle ->", inside=3)
        completions = await asyncio.wait_for(
            client.text_document_completion_async(
                types.CompletionParams(editor.document(), after_arrow)
            ),
            TIMEOUT,
        )
        assert isinstance(completions, types.CompletionList)
        labels = {item.label for item in completions.items}
        assert {"shuffle", "deal", "vote", "check_win"} <= labels
        assert "winner" not in labels

        hover = await asyncio.wait_for(
            client.text_document_hover_async(
                types.HoverParams(editor.document(), editor.find("-> vote ->", inside=4))
            ),
            TIMEOUT,
        )
        assert hover is not None and isinstance(hover.contents, types.MarkupContent)
        assert "**action** `vote`" in hover.contents.value
        assert "scope:" in hover.contents.value and "out:" in hover.contents.value

        outline = await asyncio.wait_for(
            client.text_document_document_symbol_async(
                types.DocumentSymbolParams(editor.document())
            ),
            TIMEOUT,
        )
        assert outline is not None
        names = {entry.name for entry in outline}
        assert {"shuffle", "vote", "mainflow", "@Moderator", "winner"} <= names

    run_editor(werewolf, body)
