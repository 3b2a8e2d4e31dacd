"""``fems2py lsp``: the checker and the symbol index where the author types.

A Language Server (pygls + lsprotocol) over stdio. It publishes the checker's diagnostics as
the author types (debounced), and answers definition, references, rename, hover, completion
and the outline from :mod:`fems2py.symbols`. Everything is recomputed from the open text of
one file at a time: a ``.fems`` script is one file, so there is no project index to keep.

pygls is an optional extra (``pip install 'fems2py[lsp]'``); the rest of fems2py never
imports this module.
"""

from __future__ import annotations

import ast
import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from fems_runtime.words import RESERVED_NODE_NAMES
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition

from fems2py import __version__
from fems2py.checker import CheckedScript
from fems2py.diagnostics import Diagnostic
from fems2py.frontend import analyze_source
from fems2py.kinds import ACTION_KINDS, FIELD_NAMES, kinds_with
from fems2py.nodes import Action, ActorDef, Module, Script, Span, VarDecl
from fems2py.symbols import Occurrence, Symbol, SymbolIndex, SymbolKind, build_index

#: How long the server waits after the last keystroke before it checks the file again.
DEBOUNCE_SECONDS = 0.3

_IDENTIFIER = re.compile(r"^@?[^\W\d]\w*$")


@dataclass
class _Analysis:
    """One version of one open file: its text, names and (once checked) the checked tree."""

    version: int | None
    source: str
    index: SymbolIndex
    checked: CheckedScript | None = None


class FemsLanguageServer(LanguageServer):
    """Keeps the latest analysis of each open ``.fems`` document."""

    def __init__(self) -> None:
        super().__init__("fems2py", __version__)
        self.analyses: dict[str, _Analysis] = {}
        self.pending: dict[str, asyncio.Task[None]] = {}

    def analysis(self, uri: str) -> tuple[TextDocument, _Analysis]:
        """The document and its analysis, rebuilding the symbol index if the text moved on."""
        document = self.workspace.get_text_document(uri)
        known = self.analyses.get(uri)
        if known is None or known.source != document.source:
            known = _Analysis(document.version, document.source, build_index(document.source))
            self.analyses[uri] = known
        return document, known


server = FemsLanguageServer()


# --------------------------------------------------------------------------- diagnostics


def check_document(ls: FemsLanguageServer, uri: str) -> None:
    """Check the document's current text and publish every diagnostic with its hint."""
    document, analysis = ls.analysis(uri)
    path = Path(to_fs_path(uri) or document.filename or "script.fems")
    try:
        checked, diagnostics = analyze_source(analysis.source, str(path), path.parent)
    except Exception as error:  # a bug of ours must not take the author's editor down
        ls.window_log_message(
            types.LogMessageParams(types.MessageType.Error, f"fems2py could not check: {error}")
        )
        return
    analysis.checked = checked
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(
            uri=uri,
            version=document.version,
            diagnostics=[_lsp_diagnostic(document, d) for d in diagnostics],
        )
    )


def _lsp_diagnostic(document: TextDocument, diagnostic: Diagnostic) -> types.Diagnostic:
    message = diagnostic.message
    if diagnostic.hint:
        message += f"\nhint: {diagnostic.hint}"
    severity = (
        types.DiagnosticSeverity.Error
        if diagnostic.severity == "error"
        else types.DiagnosticSeverity.Warning
    )
    return types.Diagnostic(
        range=_span_range(document, diagnostic.span),
        message=message,
        severity=severity,
        source="fems2py",
    )


def _span_range(document: TextDocument, span: Span) -> types.Range:
    end_col = span.end_col if (span.end_line, span.end_col) > (span.line, span.col) else span.col
    return _range(document, span.line, span.col - 1, span.end_line, end_col - 1)


def _range(document: TextDocument, line: int, col: int, end_line: int, end_col: int) -> types.Range:
    """A range in the client's units from 1-based lines and 0-based character columns."""
    start = document.position_to_client_units(ServerTextPosition(line - 1, col))
    end = document.position_to_client_units(ServerTextPosition(end_line - 1, end_col))
    return types.Range(start, end)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: FemsLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    check_document(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: FemsLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    check_document(ls, params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
async def did_change(ls: FemsLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    """Check once the author pauses: each change restarts the wait."""
    uri = params.text_document.uri
    waiting = ls.pending.pop(uri, None)
    if waiting is not None:
        waiting.cancel()

    async def check_later() -> None:
        await asyncio.sleep(DEBOUNCE_SECONDS)
        ls.pending.pop(uri, None)
        check_document(ls, uri)

    ls.pending[uri] = asyncio.ensure_future(check_later())


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: FemsLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.analyses.pop(uri, None)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# --------------------------------------------------------------------------- navigation


def _occurrence_at(
    ls: FemsLanguageServer, uri: str, position: types.Position
) -> tuple[TextDocument, _Analysis, Occurrence | None]:
    document, analysis = ls.analysis(uri)
    server_position = document.position_from_client_units(position)
    found = analysis.index.at(server_position.line + 1, server_position.character)
    return document, analysis, found


def _location(document: TextDocument, uri: str, occurrence: Occurrence) -> types.Location:
    return types.Location(
        uri, _range(document, occurrence.line, occurrence.col, occurrence.line, occurrence.end)
    )


def _definition_of(index: SymbolIndex, symbol: Symbol) -> Occurrence | None:
    """Where a symbol is defined; a node without a binding line is defined where it is first
    written."""
    found = index.definition(symbol)
    if found is None and symbol.kind == "node":
        uses = index.references(symbol)
        found = uses[0] if uses else None
    return found


@server.feature(types.TEXT_DOCUMENT_DEFINITION)
def definition(ls: FemsLanguageServer, params: types.DefinitionParams) -> types.Location | None:
    uri = params.text_document.uri
    document, analysis, found = _occurrence_at(ls, uri, params.position)
    if found is None:
        return None
    if found.symbol.kind == "function":
        return _python_definition(ls, analysis, found.symbol.name)
    if found.symbol.kind == "code" and analysis.checked is not None:
        path = analysis.checked.code_files.get(found.symbol.name)
        if path is not None and found.definition:
            return types.Location(from_fs_path(str(path)) or "", _start_of_file())
    target = _definition_of(analysis.index, found.symbol)
    return None if target is None else _location(document, uri, target)


def _start_of_file() -> types.Range:
    return types.Range(types.Position(0, 0), types.Position(0, 0))


def _python_definition(
    ls: FemsLanguageServer, analysis: _Analysis, qualified: str
) -> types.Location | None:
    """``alias.fn`` → the ``def fn`` line in the alias's ``code:`` file (read with ``ast``,
    never imported)."""
    if analysis.checked is None:
        return None
    alias, _, function = qualified.partition(".")
    path = analysis.checked.code_files.get(alias)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            start = types.Position(node.lineno - 1, node.col_offset)
            return types.Location(from_fs_path(str(path)) or "", types.Range(start, start))
    return None


@server.feature(types.TEXT_DOCUMENT_REFERENCES)
def references(
    ls: FemsLanguageServer, params: types.ReferenceParams
) -> list[types.Location] | None:
    uri = params.text_document.uri
    document, analysis, found = _occurrence_at(ls, uri, params.position)
    if found is None:
        return None
    uses = analysis.index.references(found.symbol)
    if not params.context.include_declaration:
        uses = [use for use in uses if not use.definition]
    return [_location(document, uri, use) for use in uses]


_RENAMABLE: frozenset[SymbolKind] = frozenset({"action", "module", "variable", "actor", "node"})


@server.feature(types.TEXT_DOCUMENT_PREPARE_RENAME)
def prepare_rename(ls: FemsLanguageServer, params: types.PrepareRenameParams) -> types.Range | None:
    document, _, found = _occurrence_at(ls, params.text_document.uri, params.position)
    if found is None or not _can_rename(found.symbol):
        return None
    return _range(document, found.line, found.col, found.line, found.end)


def _can_rename(symbol: Symbol) -> bool:
    return symbol.kind in _RENAMABLE and symbol.name not in RESERVED_NODE_NAMES


@server.feature(types.TEXT_DOCUMENT_RENAME)
def rename(ls: FemsLanguageServer, params: types.RenameParams) -> types.WorkspaceEdit | None:
    """Rename an action, module, variable, actor or node everywhere it is used in the file.

    An actor keeps its ``@`` (typing ``bob`` for ``@ann`` gives ``@bob``); a name that is no
    FEM identifier is refused with a message instead of an edit that breaks the script.
    """
    uri = params.text_document.uri
    document, analysis, found = _occurrence_at(ls, uri, params.position)
    if found is None or not _can_rename(found.symbol):
        return None
    new_name = params.new_name.strip()
    if found.symbol.name.startswith("@") and not new_name.startswith("@"):
        new_name = "@" + new_name
    if not found.symbol.name.startswith("@"):
        new_name = new_name.removeprefix("@")
    if not _IDENTIFIER.match(new_name):
        raise ValueError(f"'{params.new_name}' is not a FEM name (letters, digits and _)")
    edits = []
    for use in analysis.index.references(found.symbol):
        written = document.lines[use.line - 1][use.col : use.end]
        # ``ai bob`` defines ``@bob`` without writing its ``@`` (§6.1): keep it that way.
        replacement = new_name if written.startswith("@") else new_name.removeprefix("@")
        edits.append(
            types.TextEdit(_range(document, use.line, use.col, use.line, use.end), replacement)
        )
    return types.WorkspaceEdit(changes={uri: edits})


# --------------------------------------------------------------------------- hover


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: FemsLanguageServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    document, analysis, found = _occurrence_at(ls, uri, params.position)
    if found is None:
        return None
    text = describe(analysis, found.symbol)
    if text is None:
        return None
    return types.Hover(
        contents=types.MarkupContent(types.MarkupKind.Markdown, text),
        range=_range(document, found.line, found.col, found.line, found.end),
    )


def describe(analysis: _Analysis, symbol: Symbol) -> str | None:
    """What a name is, for the hover: an action's kind, executor, scope and outs; a
    variable's declaration and type; an actor's kind, soul and source."""
    definition = _definition_of(analysis.index, symbol)
    declared = analysis.source.split("\n")[definition.line - 1].strip() if definition else None
    script = analysis.checked.script if analysis.checked is not None else None
    if symbol.kind == "action":
        action = _find_action(script, symbol) if script is not None else None
        if action is not None:
            return _describe_action(action)
    if symbol.kind == "variable" and script is not None:
        variable = _find_variable(script, symbol)
        if variable is not None:
            kind = _VALUE_TYPES.get(type(variable.value).__name__, "value")
            where = "" if symbol.namespace == "main" else f" (local of {symbol.namespace})"
            return f"**variable** `{variable.name}`: {kind}{where}\n\n```fems\n{declared}\n```"
    if symbol.kind == "actor" and script is not None:
        actor = next((a for a in script.actors if a.name == symbol.name), None)
        if actor is not None:
            return _describe_actor(actor)
    if declared is None:
        return f"**{symbol.kind}** `{symbol.name}` (not defined in this file)"
    return f"**{symbol.kind}** `{symbol.name}`\n\n```fems\n{declared}\n```"


_VALUE_TYPES = {
    "StringValue": "string",
    "NumberValue": "number",
    "BoolValue": "bool",
    "NullValue": "null",
    "ActorValue": "actor",
    "ListValue": "list",
    "DictValue": "dict",
}


def _describe_action(action: Action) -> str:
    header = ACTION_KINDS[action.kind].written.replace("(@x)", f"({action.executor})")
    if action.func is not None:
        header = f"@func({action.func.alias}.{action.func.func})"
    lines = [f"**action** `{action.name}` {header}"]
    if action.role:
        lines.append(f"- plays: `{action.role}`")
    if action.scope is not None:
        scope = ", ".join(_scope_item(item.kind, item.name) for item in action.scope.items)
        lines.append(f"- scope: `[{scope}]`")
    if action.outs:
        outs = ", ".join(
            out.target.written + (f" ({out.type.name})" if out.type else "") for out in action.outs
        )
        lines.append(f"- out: `{outs}`")
    if action.assignments:
        lines.append(f"- assigns: `{', '.join(a.target.written for a in action.assignments)}`")
    if action.max_retries is not None or action.fallback is not None:
        lines.append(f"- strict: max_retries {action.max_retries or 0}")
    return "\n".join(lines)


def _scope_item(kind: str, name: str) -> str:
    return "{" + name + "}" if kind == "expand" else name


def _describe_actor(actor: ActorDef) -> str:
    lines = [f"**{actor.kind} actor** `{actor.name}`", f"- soul: `{actor.soul}`"]
    if actor.source is not None:
        lines.append(f"- source: `{actor.source}`")
    if actor.tools is True:
        lines.append("- tools: all")
    elif actor.tools:
        lines.append(f"- tools: {', '.join(actor.tools)}")
    return "\n".join(lines)


def _namespace_modules(script_modules: tuple[Module, ...], namespace: str) -> Module | None:
    """The module a namespace (``module:A/B``) names."""
    modules = script_modules
    found = None
    for name in namespace.removeprefix("module:").split("/"):
        found = next((m for m in modules if m.name == name), None)
        if found is None:
            return None
        modules = found.modules
    return found


def _find_action(script: Script, symbol: Symbol) -> Action | None:
    owner = _owner(script, symbol.namespace)
    actions = () if owner is None else owner.actions
    return next((a for a in actions if a.name == symbol.name), None)


def _find_variable(script: Script, symbol: Symbol) -> VarDecl | None:
    owner = _owner(script, symbol.namespace)
    variables = () if owner is None else owner.variables
    return next((v for v in variables if v.name == symbol.name), None)


def _owner(script: Script, namespace: str) -> Script | Module | None:
    """The script or module whose definitions a namespace holds."""
    return script if namespace == "main" else _namespace_modules(script.modules, namespace)


# --------------------------------------------------------------------------- completion

_ITEM_KINDS: dict[SymbolKind, types.CompletionItemKind] = {
    "action": types.CompletionItemKind.Function,
    "module": types.CompletionItemKind.Module,
    "variable": types.CompletionItemKind.Variable,
    "actor": types.CompletionItemKind.Class,
    "node": types.CompletionItemKind.Reference,
}


@server.feature(
    types.TEXT_DOCUMENT_COMPLETION,
    types.CompletionOptions(trigger_characters=["@", "{", ">", "&", "(", "["]),
)
def completion(
    ls: FemsLanguageServer, params: types.CompletionParams
) -> types.CompletionList | None:
    """Names that fit where the cursor is: actors after ``@``, variables inside ``{…}`` and
    conditions, actions and ``&modules`` after ``->``, fields at the start of an action line."""
    document, analysis = ls.analysis(params.text_document.uri)
    position = document.position_from_client_units(params.position)
    line_number = position.line + 1
    text = document.lines[position.line] if position.line < len(document.lines) else ""
    before = text[: position.character]
    items = complete(analysis.index, line_number, before)
    return types.CompletionList(is_incomplete=False, items=items)


def complete(index: SymbolIndex, line: int, before: str) -> list[types.CompletionItem]:
    """The completion items for a cursor on ``line`` after the text ``before``."""
    word = re.search(r"[@&]?[\w]*$", before)
    typed = word.group() if word else ""
    stem = before[: len(before) - len(typed)]
    if typed.startswith("@"):
        return _items(index.visible(("actor", "variable"), line), "@", only_at=True)
    if typed.startswith("&"):
        return _items(index.visible(("module",), line), "&")
    if _open_bracket(stem, "{", "}") or _open_bracket(stem, "(", ")"):
        return _items(index.visible(("variable",), line), "", skip_at=True)
    if index.flow_lines.get(line) is not None or _in_flow_context(index, line):
        if stem.rstrip().endswith(("->", "--")) or stem.rstrip().endswith(":"):
            actions = _items(index.visible(("action",), line), "")
            modules = [
                types.CompletionItem(
                    "&" + s.name, kind=types.CompletionItemKind.Module, insert_text="&" + s.name
                )
                for s in index.visible(("module",), line)
            ]
            return actions + modules
        if stem.rstrip().endswith("["):
            return _items(index.visible(("node",), line), "")
    action = index.action_lines.get(line)
    if action is not None and not stem.strip():
        return _field_items(index, action, line)
    return []


def _in_flow_context(index: SymbolIndex, line: int) -> bool:
    """A new line just below flow lines (not yet part of any flow) is written as flow."""
    return index.flow_lines.get(line - 1) is not None


def _open_bracket(text: str, opening: str, closing: str) -> bool:
    return text.rfind(opening) > text.rfind(closing)


def _items(
    symbols: list[Symbol], prefix: str, only_at: bool = False, skip_at: bool = False
) -> list[types.CompletionItem]:
    items = []
    for symbol in symbols:
        if only_at and not symbol.name.startswith("@"):
            continue
        if skip_at and symbol.name.startswith("@"):
            continue
        detail = (
            symbol.kind if symbol.namespace == "main" else f"{symbol.kind} ({symbol.namespace})"
        )
        items.append(
            types.CompletionItem(symbol.name, kind=_ITEM_KINDS.get(symbol.kind), detail=detail)
        )
    return items


def _field_items(index: SymbolIndex, action: str, line: int) -> list[types.CompletionItem]:
    """The fields the action's kind accepts (§9.2), from the kinds table."""
    symbol = next((s for s in index.visible(("action",), line) if s.name == action), None)
    kind = _action_kind(index, symbol) if symbol else None
    fields = [f for f in FIELD_NAMES if kind is None or kind in kinds_with(f)]
    return [
        types.CompletionItem(f, kind=types.CompletionItemKind.Field, insert_text=f + ": ")
        for f in fields
    ]


def _action_kind(index: SymbolIndex, symbol: Symbol) -> str | None:
    kind = index.action_kinds.get((symbol.name, symbol.namespace))
    return kind if kind in ACTION_KINDS else None


# --------------------------------------------------------------------------- outline

_SYMBOL_KINDS: dict[SymbolKind, types.SymbolKind] = {
    "action": types.SymbolKind.Function,
    "module": types.SymbolKind.Module,
    "variable": types.SymbolKind.Variable,
    "actor": types.SymbolKind.Class,
    "method": types.SymbolKind.Method,
}


@server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def document_symbols(
    ls: FemsLanguageServer, params: types.DocumentSymbolParams
) -> list[types.DocumentSymbol]:
    """The outline: actions, modules (with what they define), flows, actors and variables."""
    document, analysis = ls.analysis(params.text_document.uri)
    by_namespace: dict[str, list[types.DocumentSymbol]] = {}
    modules: dict[str, types.DocumentSymbol] = {}
    for occurrence in analysis.index.occurrences:
        symbol = occurrence.symbol
        if not occurrence.definition or symbol.kind not in _SYMBOL_KINDS:
            continue
        where = _range(document, occurrence.line, occurrence.col, occurrence.line, occurrence.end)
        entry = types.DocumentSymbol(
            name=symbol.name,
            kind=_SYMBOL_KINDS[symbol.kind],
            range=where,
            selection_range=where,
            children=[],
        )
        by_namespace.setdefault(symbol.namespace, []).append(entry)
        if symbol.kind == "module":
            inner = (
                symbol.name if symbol.namespace == "main" else f"{symbol.namespace}/{symbol.name}"
            )
            modules[inner if inner.startswith("module:") else "module:" + inner] = entry
    for line, namespace in sorted(analysis.index.flow_starts.items()):
        where = _range(document, line, 0, line, len(document.lines[line - 1].rstrip("\r\n")))
        by_namespace.setdefault(namespace, []).append(
            types.DocumentSymbol(
                name="mainflow" if namespace == "main" else "flow",
                kind=types.SymbolKind.Event,
                range=where,
                selection_range=where,
            )
        )
    for namespace, module in modules.items():
        module.children = by_namespace.pop(namespace, [])
    return by_namespace.get("main", [])


def main() -> int:
    """Serve over stdio until the editor closes the connection."""
    server.start_io()
    return 0
